"""The benches `make bench` and `python -m bench NAME` run; each writes its own section of docs/BENCHMARKS.md."""
