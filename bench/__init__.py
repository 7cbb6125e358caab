"""Amber's benchmarks: `python -m bench [engine|compare|sessions|store|gui ...] [--quick]`.

bench/suites/: the benches `make bench` and `python -m bench NAME` run; each module has
`run() -> dict` (figures, printed as it goes) and `section(results)` for its part of
docs/BENCHMARKS.md. bench/harness/: what they share (workers, machine facts, tables, the section
writer). bench/experiments/: by-hand measurements that docs/benchmarks/*.md cite.
"""
