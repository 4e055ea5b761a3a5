"""``python -m launcher ACTION``: see ``launcher/cli.py``."""

import sys

from launcher.cli import main

sys.exit(main())
