"""`python -m engine` is `amber-engine`."""
import sys

from engine.cli import launch

sys.exit(launch())
