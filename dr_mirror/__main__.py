import sys

from dr_mirror.cli import main

sys.exit(main())
