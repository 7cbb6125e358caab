"""Amber's benchmarks: `python -m bench [engine|compare|sessions|store|gui ...] [--quick]`.

Each bench module has `run() -> dict` (figures, printed as it goes); the ones written here also
have `section(results)` for their part of docs/BENCHMARKS.md.
"""
