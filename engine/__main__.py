"""`python -m engine` is `amber-engine`."""
import sys

from .cli import main

sys.exit(main())
