import sys

from app.main import launch

sys.exit(launch())
