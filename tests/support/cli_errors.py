"""What a refused CLI call looks like: exit code 2 and exactly one line on stderr."""
from __future__ import annotations


def one_line_error(proc, *needles: str) -> str:
    """Exit code 2, exactly one line on stderr (no traceback), nothing on stdout."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    line = lines[0]
    assert line.startswith("amber-engine"), line
    for needle in needles:
        assert needle in line, line
    return line
