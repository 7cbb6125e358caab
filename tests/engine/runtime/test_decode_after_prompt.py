"""Decode right after a long prompt: the prompt's chunks give back the pages of the large
mapped tables they read row by row, but not the small mapped initializers every step reads whole,
so the first decode step does not fault them back in."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from engine.runtime.host import residency
from engine.runtime.model import load_model
from engine.runtime.runner import Runner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="/proc/self/smaps and madvise are Linux's")


def _by_mapping(folder: Path) -> dict[int, tuple[int, int]]:
    """start -> (size in bytes, resident KiB) of this process's mappings of the model's data files."""
    return {m.start: (m.end - m.start, m.rss_kib)
            for m in residency.model_mappings(folder, residency.SMAPS.read_text())}


def _prompt(n: int) -> list[int]:
    return [(7 * i + 3) % 90 + 5 for i in range(n)]


def _split(folder: Path) -> int:
    """A threshold just under the tiny model's largest mapping (its embedding table): the others are
    "small". (Other models of the same folder alive in this process have the same sizes.)"""
    sizes = sorted(size for size, _ in _by_mapping(folder).values())
    assert sizes and sizes[0] < sizes[-1], sizes
    return sizes[-1] - 1


def test_a_prompt_drops_the_large_tables_and_keeps_the_small_initializers(tiny_dir, monkeypatch) -> None:
    model = load_model(tiny_dir, provider="cpu", threads=1)
    runner = Runner(model)
    keep = _split(tiny_dir)
    monkeypatch.setattr(residency, "KEEP_MAX_BYTES", keep)
    cache = runner.new_cache()
    logits = runner.forward(cache, [5])          # one step: reads every small initializer whole
    before = _by_mapping(tiny_dir)
    small_read = {s for s, (size, rss) in before.items() if size <= keep and rss > 0}
    assert small_read, "a step reads the small mapped initializers"
    logits = runner.forward(cache, _prompt(150))  # a prompt in chunks: dropped after each one
    after = _by_mapping(tiny_dir)
    assert all(rss == 0 for size, rss in after.values() if size > keep)   # the table's rows left
    assert all(after[s][1] >= before[s][1] for s in small_read)           # the small ones stayed
    # a decode step after the prompt finds them resident: nothing of them was faulted back
    assert logits is not None
    runner.forward(cache, [int(np.argmax(logits))])
    again = _by_mapping(tiny_dir)
    assert {s: again[s] for s in small_read} == {s: after[s] for s in small_read}


def test_without_the_small_ones_kept_a_prompt_drops_every_mapping(tiny_dir, monkeypatch) -> None:
    """The threshold is what keeps them: at 0 every clean mapping is dropped after a prompt, as before."""
    model = load_model(tiny_dir, provider="cpu", threads=1)
    runner = Runner(model)
    monkeypatch.setattr(residency, "KEEP_MAX_BYTES", 0)
    cache = runner.new_cache()
    runner.forward(cache, [5])
    assert any(rss for _, rss in _by_mapping(tiny_dir).values())
    runner.forward(cache, _prompt(150))
    assert all(rss == 0 for _, rss in _by_mapping(tiny_dir).values())


def test_decode_after_a_prompt_matches_a_fresh_cache(tiny_dir, monkeypatch) -> None:
    """Keeping pages resident changes no result: greedy steps after a prompt, kept or all dropped."""
    model = load_model(tiny_dir, provider="cpu", threads=1)
    runner = Runner(model)

    def greedy(keep: int) -> list[int]:
        monkeypatch.setattr(residency, "KEEP_MAX_BYTES", keep)
        cache = runner.new_cache()
        tok = int(np.argmax(runner.forward(cache, _prompt(150))))
        out = [tok]
        for _ in range(4):
            tok = int(np.argmax(runner.forward(cache, [tok])))
            out.append(tok)
        return out

    assert greedy(1 << 20) == greedy(0)
