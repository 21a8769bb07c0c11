"""``python -m dr_mirror [MM2 flags]`` runs the mirror; ``python -m dr_mirror status`` reports on it."""

import sys

if sys.argv[1:2] == ["status"]:
    from dr_mirror.status import main as status

    sys.exit(status(sys.argv[2:]))

from dr_mirror.cli import main

sys.exit(main())
