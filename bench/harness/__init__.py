"""Shared bench harness: workers, machine facts, tables, and the writer of docs/BENCHMARKS.md's sections."""
