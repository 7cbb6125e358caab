"""A download writes only below the models folder: a symlinked `.downloads/`, `.downloads/<key>/` or
`.downloads/<key>/files/` is refused with one line (exit 2), and nothing lands where it points."""
from __future__ import annotations

import pytest

from test_cli_models import cli

from engine import hub as library
from tests.support.hub_server import REPO


@pytest.mark.parametrize("level", ["downloads", "key", "files"])
def test_a_symlinked_download_folder_is_never_written_through(hub, tmp_path, level):
    home = tmp_path / "home"          # the `hub` fixture's AMBER_HOME: plan() sees the same folders
    work = library.plan(REPO, "Q8_0").work
    folder = {"downloads": work.parent, "key": work, "files": work / "files"}[level]
    outside = tmp_path / "outside"
    outside.mkdir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(outside, target_is_directory=True)
    r = cli(hub, home, "download", REPO, "Q8_0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "is not a plain folder (a symlink?)" in errors[0], r.stderr
    assert errors[0].startswith("amber-engine: error: the download folder cannot be used: ")
    assert list(outside.iterdir()) == []
    assert not [p for p in (home / "models").iterdir() if not p.name.startswith(".")]
