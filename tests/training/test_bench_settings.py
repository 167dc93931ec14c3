"""bench-train's settings are read from its command line once, typed and frozen, and travel as JSON in the shape its
reports have always had (ops compares and reads the settings two cluster runs printed). No Ray here."""

from __future__ import annotations

import dataclasses
import json

import pytest

from training.bench.plan import config_for, plan
from training.bench.settings import Config, TrainSettings
from training.bench.train import parser

#: The keys of a report's "settings" (and of every run's raw result) before the settings were typed.
REPORT_KEYS = ["tiny", "data", "model", "epochs", "repeats", "batchSize", "lr", "seed", "frameworks", "workers",
               "threads", "warm"]


def settings(*argv: str) -> TrainSettings:
    return TrainSettings.from_args(parser().parse_args(list(argv)))


def test_the_settings_travel_as_json_and_come_back_the_same():
    s = settings("--tiny", "--frameworks", "pytorch", "--workers", "2", "--threads", "1")
    text = json.dumps(s.to_json())
    assert list(json.loads(text)) == REPORT_KEYS
    assert TrainSettings.of(json.loads(text)) == s
    assert json.loads(text)["model"] == {"filters": [8, 16, 32], "dense": 32, "convDropout": 0.25, "denseDropout": 0.5}
    assert s.data_part.max_train_samples == 256 and s.data_part.source == "digits"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.epochs = 9  # type: ignore[misc]


def test_the_plan_of_the_settings():
    s = settings("--frameworks", "pytorch,tensorflow", "--workers", "1,2", "--threads", "1,2")
    keys = [c.key for c in plan(s)]
    # plain DDP (no Ray) for PyTorch only, and only for more than one process
    assert keys[:7] == ["pytorch/plain-1t", "pytorch/plain-2t", "pytorch/ddp-2p", "pytorch/ray-1w", "pytorch/ray-2w",
                        "pytorch/ray-1w-warm", "pytorch/ray-2w-warm"] and len(keys) == 13
    assert [c.key for c in plan(s.one_run())] == [k for k in keys if not k.endswith("-warm")]
    ddp = plan(s)[2]
    assert (ddp.kind, ddp.workers, ddp.threads, ddp.label) == ("ddp", 2, 1, "plain DDP, 2 processes (no Ray)")
    assert config_for("pytorch/ddp-2p") == ddp
    for bad in ("tensorflow/ddp-2p", "pytorch/ddp-1p"):
        with pytest.raises(ValueError, match="pytorch/ddp-<processes>p with 2 or more"):
            config_for(bad)
    warm = plan(s)[6]
    assert (warm.label, warm.comparison_key) == ("Ray Train, 2 workers, warm Ray", "ray_2_workers_warm")
    assert Config.of(json.loads(json.dumps(warm.to_json()))) == warm
    assert config_for("tensorflow/ray-2w") == Config("tensorflow/ray-2w", "tensorflow", "ray", threads=1, workers=2)
    with pytest.raises(ValueError, match="expected <framework>/plain-<threads>t"):
        config_for("pytorch/ray-0w")


def test_bench_tunes_settings_make_a_valid_search_spec_per_scheduler(tmp_path):
    from training.bench import tune
    from training.bench.settings import TuneSettings
    from training.job import validate_spec

    s = TuneSettings.from_args(tune.parser().parse_args(["--tiny", "--concurrent", "2"]))
    assert list(s.to_json()) == ["numSamples", "epochs", "model", "data", "tiny", "framework", "metric", "mode",
                                 "searchSpace", "asha", "searchSeed", "concurrent"]
    for scheduler in ("fifo", "asha"):
        spec = tune.spec_for(s, scheduler, str(tmp_path))
        validate_spec(spec)
        assert spec["tuneConfig"]["maxConcurrentTrials"] == 2 and spec["tuneConfig"]["seed"] == s.search_seed
    assert tune.spec_for(s, "asha", str(tmp_path))["tuneConfig"]["schedulerConfig"] == {"gracePeriod": 1,
                                                                                       "reductionFactor": 3}
