"""Benchmarks (``make bench``): perf_analyzer against the ensembles, in-process baselines, vLLM as a peer.

Never part of ``make test``. See docs/PERFORMANCE.md for the results and how to reproduce them.
"""
