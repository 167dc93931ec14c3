"""Ray Train trainer for a job: TorchTrainer, TensorflowTrainer or XGBoostTrainer (Ray Train V2, Ray 2.60)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from training.env import TF_WORKER_ENV
from training.errors import SpecError

FRAMEWORKS = ("pytorch", "tensorflow", "xgboost")


def builtin_loop(framework: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    if framework == "pytorch":
        from training.train_torch import train_loop
    elif framework == "tensorflow":
        from training.train_tf import train_loop
    elif framework == "xgboost":
        from training.train_xgb import train_loop
    else:
        raise SpecError(f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}",
                        field="trainConfig.framework")
    return train_loop


COLLECTIVE_TIMEOUT_ENV = "TRAINING_COLLECTIVE_TIMEOUT_SECONDS"


def torch_config():
    """The process group's collective timeout (what makes a hung NCCL collective fail instead of waiting forever):
    from TRAINING_COLLECTIVE_TIMEOUT_SECONDS, which the charts set from the cluster value
    nccl.collectiveTimeoutSeconds; Ray Train's default (1800 s) without it."""
    import os

    from ray.train.torch import TorchConfig

    raw = os.environ.get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not raw:
        return TorchConfig()
    try:
        seconds = int(raw)
    except ValueError:
        raise SpecError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise SpecError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return TorchConfig(timeout_s=seconds)


def build_trainer(job: dict[str, Any], user_fn: Callable | None = None):
    import ray.train

    framework = job["framework"]
    if framework not in FRAMEWORKS:
        raise SpecError(f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}",
                        field="trainConfig.framework")
    config: dict[str, Any] = {"job": job}
    if user_fn is not None:
        from training.user_trainer import user_loop

        loop = user_loop
        config["fn"] = user_fn
    else:
        loop = builtin_loop(framework)

    resources = {"CPU": job["cpuPerWorker"]}
    if job["gpuPerWorker"]:
        resources["GPU"] = job["gpuPerWorker"]
    scaling = ray.train.ScalingConfig(
        num_workers=job["numWorkers"],
        use_gpu=job["useGpu"],
        resources_per_worker=resources,
        placement_strategy=job["placementStrategy"],
    )
    ck = job["checkpoint"]
    checkpoint_config = ray.train.CheckpointConfig(
        num_to_keep=ck["keepBest"],
        checkpoint_score_attribute=ck["metric"] if ck["keepBest"] else None,
        checkpoint_score_order=ck["metricMode"],
    )
    run_config = ray.train.RunConfig(
        name=job["name"],
        storage_path=ck["storagePath"],
        failure_config=ray.train.FailureConfig(max_failures=ck["maxFailures"]),
        checkpoint_config=checkpoint_config,
        worker_runtime_env={"env_vars": dict(TF_WORKER_ENV)} if framework == "tensorflow" else None,
    )
    common = dict(train_loop_config=config, scaling_config=scaling, run_config=run_config)
    if framework == "pytorch":
        from ray.train.torch import TorchTrainer

        return TorchTrainer(loop, torch_config=torch_config(), **common)
    if framework == "tensorflow":
        from ray.train.tensorflow import TensorflowTrainer

        return TensorflowTrainer(loop, **common)
    from ray.train.xgboost import XGBoostTrainer

    return XGBoostTrainer(loop, **common)
