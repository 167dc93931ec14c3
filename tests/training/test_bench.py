"""Both benchmarks in tiny mode write a valid JSON, a markdown table and a PNG plot. No timing is asserted: the
figures of a tiny run on a shared machine mean nothing; only their presence and consistency are checked."""

from __future__ import annotations

import json

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000


def test_bench_train_tiny(tmp_path, ray_address):
    """Plain (1 and 2 threads) and Ray Train (1 and 2 workers, and 2 workers warm), one tiny run each. The Ray runs
    join the session's Ray instead of starting their own (the warm one through --warm-address, the path that joins
    the warm Ray). PyTorch only: TensorFlow's Ray runs would add ~50 s of start-up to the suite (its path runs in
    every `make bench-train`)."""
    from training.bench.train import main

    out = tmp_path / "bench-train"
    assert main(["--tiny", "--frameworks", "pytorch", "--out", str(out), "--ray-address", ray_address,
                 "--warm-address", ray_address]) == 0
    report = json.loads((out / "bench-train.json").read_text())
    assert report["benchmark"] == "bench-train" and report["settings"]["tiny"] is True
    keys = {f"pytorch/{c}" for c in ("plain-1t", "plain-2t", "ddp-2p", "ray-1w", "ray-2w", "ray-1w-warm",
                                     "ray-2w-warm")}
    assert set(report["configurations"]) == keys
    assert report["warmRayAddress"] == ray_address
    warm = report["comparison"]["pytorch"]["ray_2_workers_warm"]
    assert warm["warm_ray"] is True and isinstance(warm["target_first_step_le_10s"], bool)
    # from fit(): the process's imports and the trainer's set-up are not in it
    assert 0 < warm["fit_to_first_step_seconds"] < warm["time_to_first_step_seconds"]
    assert isinstance(warm["target_fit_to_first_step_le_10s"], bool)
    # The global batch: every configuration runs the same steps on the same samples, whatever its workers.
    assert len({(a["global_batch"], a["samples_trained"]) for a in report["configurations"].values()}) == 1
    for agg in report["configurations"].values():
        assert agg["runs"] == 1
        assert agg["wall_s"] >= agg["startup_s"] > 0 and agg["steady_samples_per_s"] > 0
        assert 0 <= agg["val_accuracy"] <= 1
        assert sum(agg["startup_phases"].values()) == pytest.approx(agg["startup_s"], abs=0.05)
    for fw in ("pytorch",):
        comp = report["comparison"][fw]
        assert comp["baseline"]["training_type"] == "baseline" and comp["baseline"]["threads"] == 1
        assert "baseline_2_threads" in comp
        for name, workers in (("ray_1_worker", 1), ("ray_2_workers", 2)):
            block = comp[name]
            assert block["training_type"] == "ray_distributed" and block["num_workers"] == workers
            assert block["efficiency"] == pytest.approx(block["speedup"] / workers, abs=1e-3)
            assert block["equal_cpu_baseline"] == f"plain, {workers} thread(s)"
            assert isinstance(block["target_steady_ge_0.9x_equal_cpu"], bool)
            assert "ray.init" in report["configurations"][f"{fw}/ray-{workers}w"]["startup_phases"]
        # plain DDP: the same loop in 2 processes without Ray, trained for real, and Ray's ratio to it
        ddp = comp["ddp_2_processes"]
        assert ddp["training_type"] == "ddp_without_ray" and ddp["num_processes"] == 2
        assert ddp["equal_cpu_baseline"] == "plain, 2 thread(s)" and ddp["steady_vs_equal_cpu_baseline"] > 0
        assert comp["ray_2_workers"]["steady_vs_plain_ddp"] > 0 and "steady_vs_plain_ddp" not in comp["ray_1_worker"]
        assert "gloo process group" in " ".join(report["configurations"][f"{fw}/ddp-2p"]["startup_phases"])
    md = (out / "bench-train.md").read_text()
    assert "| framework | configuration |" in md and "Ray Train, 2 workers" in md and "Where the start-up goes" in md
    assert "Ray Train, 2 workers, warm Ray" in md and "(less than 2 points)" in md and "(≤ 10 s)" in md
    assert "plain DDP, 2 processes (no Ray)" in md and "of which DDP's own" in md and "s after fit() ->" in md
    check_png(out / "bench-train.png")


def test_bench_tune_tiny(tmp_path, ray_session):
    from training.bench.tune import main

    out = tmp_path / "bench-tune"
    assert main(["--tiny", "--out", str(out)]) == 0
    report = json.loads((out / "bench-tune.json").read_text())
    assert report["benchmark"] == "bench-tune" and report["settings"]["tiny"] is True
    fifo, asha = report["schedulers"]["fifo"], report["schedulers"]["asha"]
    n, epochs = report["settings"]["numSamples"], report["settings"]["epochs"]
    assert fifo["numTrials"] == asha["numTrials"] == n
    assert fifo["totalTrialIterations"] == n * epochs and fifo["earlyStoppedTrials"] == 0
    assert asha["totalTrialIterations"] <= n * epochs
    # The same search seed: both schedulers saw the same sampled configs.
    assert sorted(json.dumps(c["config"], sort_keys=True) for c in fifo["curves"]) == \
        sorted(json.dumps(c["config"], sort_keys=True) for c in asha["curves"])
    c = report["comparison"]
    assert c["iterationsRatio"] == pytest.approx(asha["totalTrialIterations"] / fifo["totalTrialIterations"], abs=1e-3)
    assert isinstance(c["targetBestWithin1Percent"], bool) and isinstance(c["targetIterationsAtMostHalf"], bool)
    md = (out / "bench-tune.md").read_text()
    assert "| scheduler | best val_loss |" in md and "| asha |" in md and "| fifo |" in md
    check_png(out / "bench-tune.png")
    for name in ("fifo", "asha"):
        assert (out / f"{name}-trials.csv").read_text().count("\n") == n + 1
        assert json.loads((out / f"{name}-result.json").read_text())["status"] == "success"
