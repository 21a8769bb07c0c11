import sys

from bus.cli import main

sys.exit(main())
