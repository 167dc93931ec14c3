"""Benchmarks: ``python -m training.bench.train`` (plain vs Ray Train throughput, start-up, accuracy) and
``python -m training.bench.tune`` (ASHA vs FIFO). Both write JSON, a markdown table and a PNG plot under
``results/bench-*``; ``--tiny`` runs a seconds-long version for tests."""
