"""Benchmarks: figures and ratios against a baseline measured in the same run (not timed tests)."""
