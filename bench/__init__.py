"""Benchmarks and the chaos suite (``python -m bench.chaos``)."""
