"""``python -m dr_mirror [MM2 flags]`` runs the mirror; ``python -m dr_mirror status`` reports on it;
``python -m dr_mirror switchover --to dr|primary`` moves the business to the other site."""

import sys

if sys.argv[1:2] == ["status"]:
    from dr_mirror.status import main as status

    sys.exit(status(sys.argv[2:]))
if sys.argv[1:2] == ["switchover"]:
    from dr_mirror.switchover import main as switchover

    sys.exit(switchover(sys.argv[2:]))

from dr_mirror.cli import main

sys.exit(main())
