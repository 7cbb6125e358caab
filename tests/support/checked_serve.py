"""`python -m tests.support.checked_serve serve ...`: `amber-engine serve ...` (the same CLI, the
same app) with every answer checked against OpenAI's OpenAPI spec (tests.support.openapi_check),
for `ServerProcess`. The spec and the findings' log are named by the environment it is given."""
import sys

from tests.support.openapi_check import install_from_env

install_from_env()
from engine.cli import launch  # noqa: E402 - after the app factory is wrapped

sys.exit(launch())
