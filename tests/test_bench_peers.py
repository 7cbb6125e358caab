"""The peer bench's own logic (bench/suites/peers.py, bench/harness/llama_tools.py): the peers' CMake
options, and reading `llama-bench -o json` as llama.cpp and ik_llama.cpp print it (tests/data/llama_bench
holds real output of both builds, trimmed to the fields read)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.harness import llama_build, llama_tools
from bench.suites import peers

DATA = Path(__file__).parent / "data" / "llama_bench"
ZEN3 = "flags\t\t: fpu sse2 avx f16c fma bmi1 avx2 bmi2\n"
SPR = ("flags\t\t: fpu sse2 avx f16c fma bmi1 avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl "
       "avx512_vnni amx_tile amx_int8\n")


def test_cmake_options_name_the_cpu_and_never_amx() -> None:
    zen3 = llama_build.cpu_flags(ZEN3)
    main = llama_tools.cmake_options("llama.cpp", zen3)
    ik = llama_tools.cmake_options("ik_llama.cpp", zen3)
    assert "-DGGML_NATIVE=OFF" in main and "-DLLAMA_CURL=OFF" in main
    # ik_llama.cpp does not switch its AVX2 baseline on by itself with GGML_NATIVE=OFF
    assert {"-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"} <= set(ik)
    assert not any(o.startswith("-DGGML_AVX2") for o in main)
    spr = llama_tools.cmake_options("ik_llama.cpp", llama_build.cpu_flags(SPR))
    assert "-DGGML_AVX512_VNNI=ON" in spr and not any("AMX" in o for o in spr)


def test_mainline_rows_read_depth_and_flash_attention() -> None:
    rows = peers._rows("llama.cpp", (DATA / "mainline.json").read_text(), "default")
    raw = json.loads((DATA / "mainline.json").read_text())
    assert len(rows) == len(raw)
    for row, r in zip(rows, raw, strict=True):
        assert row["test"] == ("pp" if r["n_prompt"] else "tg")
        assert row["tokens"] == (r["n_prompt"] or r["n_gen"]) and row["depth"] == r["n_depth"]
        assert row["config"] == ("FA on" if r["flash_attn"] == 1 else "FA off")
        assert row["tok_s"] == r["avg_ts"]
    assert {r["depth"] for r in rows} == {0, 128}


def test_ik_generation_after_a_prompt_counts_as_depth() -> None:
    text = (DATA / "ik.json").read_text()
    rows = peers._rows("ik_llama.cpp", text, "-rtr 1")
    raw = json.loads(text)
    gp = [(row, r) for row, r in zip(rows, raw, strict=True) if r["n_prompt"] and r["n_gen"]]
    assert gp, "the fixture has -gp rows"
    for row, r in gp:          # "tg N @ pp D": N tokens decoded after a prompt of D
        assert (row["test"], row["tokens"], row["depth"]) == ("tg", r["n_gen"], r["n_prompt"])
    assert all(row["config"].startswith("-rtr 1, FA ") for row in rows)


def test_best_figures_take_each_configurations_median_then_the_best() -> None:
    def run(config: str, pp: float, tg: float, rss: int) -> dict:
        return {"rows": [{"test": "pp", "tokens": 512, "depth": 0, "tok_s": pp, "config": config},
                         {"test": "tg", "tokens": 32, "depth": 0, "tok_s": tg, "config": config}],
                "peak_rss_bytes": rss}
    runs = [run("FA on", 100, 10, 5), run("FA off", 120, 9, 7), run("FA on", 300, 12, 6), run("FA off", 130, 8, 4)]
    best = peers.best_figures(runs)
    # FA on: pp median 200, tg 11; FA off: pp 125, tg 8.5
    assert best["figures"]["pp512@0"] == {"tok_s": 200, "config": "FA on", "all": {"FA on": 200, "FA off": 125}}
    assert best["figures"]["tg32@0"]["config"] == "FA on" and best["figures"]["tg32@0"]["tok_s"] == 11
    assert best["peak_rss_bytes"] == 7


def test_long_runs_ask_each_peer_for_its_own_depth_flags() -> None:
    main = llama_tools.Tools("llama.cpp", Path("b"), Path("q"), "s", "")
    ik = llama_tools.Tools("ik_llama.cpp", Path("b"), Path("q"), "s", "")
    main_args = [a for _, a in peers.peer_runs(main, long=True)]
    assert any("-d" in a and "4000,8000" in a for a in main_args)
    ik_runs = peers.peer_runs(ik, long=True)
    assert {c for c, _ in ik_runs} == {"default", "-rtr 1"}
    assert all("-gp" in a and "8000,16" in a for _, a in ik_runs)
