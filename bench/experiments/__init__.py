"""By-hand experiments, kept because docs/benchmarks/*.md cite their figures; not part of `make bench`."""
