"""Benchmarks: `make bench` (python -m bench.run). See docs/benchmarks.md."""
