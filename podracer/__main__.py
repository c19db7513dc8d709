"""``python -m podracer`` runs the console command (see ``podracer.cli``)."""

import sys

from podracer.cli import main

sys.exit(main())
