"""``python -m rolling_calib.cli`` runs the command line."""

import sys

from rolling_calib.cli import main

sys.exit(main())
