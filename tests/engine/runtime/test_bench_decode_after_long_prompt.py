"""bench.experiments.decode_after_long_prompt's worker (decode right after a long prompt) on the tiny model: the
sequence bench compare's worker runs, with per-step figures that the table renders."""
from __future__ import annotations

from bench.experiments import decode_after_long_prompt as bench_decwarm
from engine.runtime import providers


def test_the_worker_records_every_decode_step_after_its_prompt_history(tiny_dir, monkeypatch) -> None:
    # The worker (a fresh process in the bench) wraps session_options for spinning off: undone after.
    monkeypatch.setattr(providers, "session_options", providers.session_options)
    out = bench_decwarm.worker(str(tiny_dir), 1, "long", False, 10, contexts=[16, 40], sizes=[64, 128])
    assert len(out["history"]) == 2 and all(rate > 0 for rate in out["history"])
    assert set(out["phases"]) == {"16", "40"}
    for phase in out["phases"].values():
        steps = phase["steps"]
        assert len(steps) == 10
        for row in steps:
            assert row["ms"] > 0 and row["cpu_ms"] >= 0
            assert min(row["minflt"], row["majflt"], row["nvcsw"], row["nivcsw"]) >= 0
            assert all(ms >= 0 for ms in row["thread_cpu_ms"])
        assert {"others_cpu_ms", "steal_ms"} <= set(phase)
    s = bench_decwarm.summary([out], "16")
    assert s["tok_s"] > 0 and s["first_ms"] > 0 and s["warm_ms"] > 0
    text = bench_decwarm.table({"/m/tiny": {"long/off": {"16": s, "40": bench_decwarm.summary([out], "40")}}})
    rows = [line for line in text.splitlines() if line.startswith("| long/off |")]
    assert [r.split("|")[2].strip() for r in rows] == ["16", "40"]
    assert f"{s['tok_s']:.1f}" in rows[0]
    figures = bench_decwarm.phase_figures(out)
    assert set(figures) == {"16", "40"} and all(rate > 0 and others >= 0 for rate, others in figures.values())


def test_no_history_runs_no_prefill_before_the_contexts(tiny_dir) -> None:
    out = bench_decwarm.worker(str(tiny_dir), 1, "none", None, 2, contexts=[8])
    assert out["history"] == [] and len(out["phases"]["8"]["steps"]) == 2


def test_the_machine_counters_count_this_process_cpu_too() -> None:
    """_machine_ms's busy time is the whole machine's, so this process's own CPU time is in it."""
    import resource
    busy0, steal0 = bench_decwarm._machine_ms()
    own0 = resource.getrusage(resource.RUSAGE_SELF)
    x = 0
    while (resource.getrusage(resource.RUSAGE_SELF).ru_utime - own0.ru_utime) < 0.3:
        x += 1
    busy1, steal1 = bench_decwarm._machine_ms()
    assert busy1 - busy0 >= 200          # 300 ms of this process's CPU, counted in 10 ms ticks
    assert steal1 >= steal0 >= 0


def test_a_paste_streams_a_chat_prompt_of_about_its_length_then_decodes_at_it_and_half(tiny_dir) -> None:
    out = bench_decwarm.paste(str(tiny_dir), 1, 60, 3)
    n = out["tokens"]
    assert 30 <= n <= 120      # words scaled to the model's own tokenizer and chat template
    assert out["ttft_s"] > 0 and out["prefill_s"] > 0 and out["cpu_s"] > 0
    assert set(out["decode"]) == {str(n), str(n // 2)}
    assert all(d["tok_s"] > 0 and d["ms"] > 0 and d["cpu_ms"] >= 0 for d in out["decode"].values())
