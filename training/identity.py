"""A run's identity when its spec has no ``name``: derived from what the spec trains.

Two specs that train the same thing get the same name, so re-submitting a spec resumes its own run; two specs that
train different things never share a run folder, checkpoints or a Tune experiment. What counts is what changes the
trained model (or the search): the mode, framework and trainer, the data, the model and its hyperparameters, the
number of workers (the effective batch), and in mode tune the search itself. Operational fields do not: the storage
path, resources per worker, waits, retries, checkpoint cadence and health checks. Neither do ``trainConfig.epochs``
in mode train: raising them continues the same run, as it does for a named run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

HASH_LENGTH = 10


def identity_fields(job: Mapping[str, Any]) -> dict[str, Any]:
    """The normalized fields that name a run (see the module's docstring)."""
    data = job["data"]
    fields: dict[str, Any] = {
        "mode": job["mode"],
        "framework": job["framework"],
        "trainerPath": job["trainerPath"],
        "numWorkers": [job.get("minWorkers"), job["numWorkers"]],
        "batchSize": job["batchSize"],
        "lr": job["lr"],
        "seed": job["seed"],
        "model": job["model"] if job["framework"] != "xgboost" and not job["trainerPath"] else None,
        "xgboost": job["xgboost"],
        "params": job["params"],
        "data": {k: data[k] for k in ("source", "path", "validationFraction", "maxTrainSamples", "maxValSamples",
                                      "numSamples")},
    }
    if job["mode"] == "tune":
        fields["epochs"] = job["epochs"]
        fields["tune"] = {k: job["tune"][k] for k in ("searchSpace", "scheduler", "schedulerConfig", "numSamples",
                                                       "metric", "mode", "trialRunner", "seed")}
    return fields


def derived_name(job: Mapping[str, Any]) -> str:
    """``<mode>-<framework>-<10 hex digits>``; ``cluster`` for mode cluster (it keeps no run folder of its own)."""
    if job["mode"] == "cluster":
        return "cluster"
    text = json.dumps(identity_fields(job), sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]
    return f"{job['mode']}-{job['framework']}-{digest}"
