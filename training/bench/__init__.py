"""The benchmarks, as a library: ``settings`` (what is asked, typed and frozen, travelling as JSON), ``plan`` (the
configurations; each run in a fresh process), ``loops`` (the timed loops, plain and under Ray Train), ``measure``
(per-run figures, medians, the comparison and its targets), ``warm`` (one Ray started once that warm runs join) and
``report`` (JSON, markdown, PNG). Their command lines: ``python -m training.bench.train`` (plain vs Ray Train) and
``python -m training.bench.tune`` (ASHA vs FIFO); ``--tiny`` runs a seconds-long version for tests."""
