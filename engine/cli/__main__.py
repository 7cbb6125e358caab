"""`python -m engine.cli` is `amber-engine`."""
import sys

from engine.cli.main import launch

sys.exit(launch())
