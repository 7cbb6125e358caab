"""bench.harness.common.write_section rewrites one marked section of a real file and keeps the rest."""
from __future__ import annotations

from bench.harness.common import Section, write_section


def test_a_rewrite_keeps_other_sections_and_the_hand_written_text_after_them(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    write_section(Section("engine", "Engine", "first figures", order=10), doc)
    write_section(Section("compare", "Compare", "old table", order=20), doc)
    doc.write_text(doc.read_text() + "\n## Notes by hand\n\nkept after the last section\n")
    text = doc.read_text()
    doc.write_text(text.replace("<!-- bench:compare:start -->",
                                "between engine and compare, by hand\n\n<!-- bench:compare:start -->"))
    write_section(Section("compare", "Compare", "new table", order=20), doc)
    out = doc.read_text()
    assert "new table" in out and "old table" not in out and "first figures" in out
    assert "kept after the last section" in out and "## Notes by hand" in out
    assert "between engine and compare, by hand" in out
    assert out.index("first figures") < out.index("between engine and compare") < out.index("new table")
    assert out.index("new table") < out.index("kept after the last section")
    write_section(Section("compare", "Compare", "newer table", order=20), doc)   # idempotent around it
    again = doc.read_text()
    assert again.count("kept after the last section") == 1 and again.count("between engine and compare") == 1
