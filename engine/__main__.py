"""`python -m engine` is `amber-engine`."""
import sys

from .cli import launch

sys.exit(launch())
