"""The HTTP benchmark harness (``python -m benchmarks.bench.run``): workloads, plans, reports, charts."""
