"""The Ray Train trainer of a job: TorchTrainer, TensorflowTrainer or XGBoostTrainer (Ray Train V2, Ray 2.60).

Every trainer runs :func:`training.worker.run_worker` on its workers with the trainer function: a built-in one
(``training/train_*.py``) or the user's (``trainConfig.trainerPath``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from training.env import TF_WORKER_ENV
from training.errors import SpecError
from training.faults import NO_HOOKS, TestHooks
from training.job import Job, Training, Workers

FRAMEWORKS = ("pytorch", "tensorflow", "xgboost")

#: Set by the charts from the cluster value ``nccl.collectiveTimeoutSeconds``; ``trainConfig.collectiveTimeoutSeconds``
#: overrides it for one job.
COLLECTIVE_TIMEOUT_ENV = "TRAINING_COLLECTIVE_TIMEOUT_SECONDS"

#: ``config.healthCheck`` -> Ray Train's own settings. Ray Train reads them from the driver's environment and passes
#: them on to its controller and workers (``ray.train.v2``'s list of variables to propagate).
HEALTH_CHECK_ENV = {
    "intervalSeconds": "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S",
    "workerTimeoutSeconds": "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S",
    "workerGroupStartTimeoutSeconds": "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S",
}


def builtin_trainer(framework: str) -> Callable:
    """The built-in ``train(ctx)`` of a framework."""
    if framework == "pytorch":
        from training.train_torch import train
    elif framework == "tensorflow":
        from training.train_tf import train
    elif framework == "xgboost":
        from training.train_xgb import train
    else:
        raise SpecError(f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}",
                        field="trainConfig.framework")
    return train


def collective_timeout(training: Training, environ=None) -> int | None:
    """The process group's collective timeout in seconds (what makes a hung collective fail instead of waiting
    forever): the spec's ``trainConfig.collectiveTimeoutSeconds``, else the chart's environment variable, else None
    (Ray Train's default, 1800 s)."""
    if training.collective_timeout_s:
        return training.collective_timeout_s
    environ = os.environ if environ is None else environ
    raw = environ.get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = int(raw)
    except ValueError:
        raise SpecError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise SpecError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return seconds


@contextlib.contextmanager
def health_check_settings(health_check: Mapping[str, float]) -> Iterator[dict[str, str]]:
    """``config.healthCheck`` in the driver's environment while a trainer starts its controller (restored after)."""
    wanted = {HEALTH_CHECK_ENV[k]: f"{float(v):g}" for k, v in health_check.items()}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield wanted
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def scaling_config(workers: Workers):
    import ray.train

    resources = {"CPU": workers.cpu}
    if workers.gpu:
        resources["GPU"] = workers.gpu
    count = (workers.min_count, workers.count) if workers.min_count else workers.count
    return ray.train.ScalingConfig(num_workers=count, use_gpu=workers.use_gpu, resources_per_worker=resources,
                                   placement_strategy=workers.placement_strategy)


def build_trainer(job: Job, user_fn: Callable | None = None, hooks: TestHooks = NO_HOOKS,
                  callbacks: list | None = None):
    """The Ray Train trainer of ``job`` (``fit()`` runs it); ``callbacks``: Ray Train ``UserCallback``s."""
    import ray.train

    from training.worker import run_worker

    framework = job.training.framework
    fn = user_fn if user_fn is not None else builtin_trainer(framework)
    config: dict[str, Any] = {"job": job, "fn": fn, "user": user_fn is not None, "hooks": hooks}
    ck = job.checkpoint
    run_config = ray.train.RunConfig(
        name=job.name,
        storage_path=ck.storage_path,
        failure_config=ray.train.FailureConfig(max_failures=ck.max_failures),
        checkpoint_config=ray.train.CheckpointConfig(
            num_to_keep=ck.keep_best,
            checkpoint_score_attribute=ck.metric if ck.keep_best else None,
            checkpoint_score_order=ck.metric_mode),
        # Ray Train logs every report of every worker at INFO: the console keeps our progress lines instead.
        logging_config=ray.train.LoggingConfig(log_level="WARNING"),
        callbacks=callbacks,
        worker_runtime_env={"env_vars": dict(TF_WORKER_ENV)} if framework == "tensorflow" else None,
    )
    common = dict(train_loop_config=config, scaling_config=scaling_config(job.workers), run_config=run_config)
    if framework == "pytorch":
        from ray.train.torch import TorchConfig, TorchTrainer

        timeout = collective_timeout(job.training)
        return TorchTrainer(run_worker, torch_config=TorchConfig(timeout_s=timeout) if timeout else TorchConfig(),
                            **common)
    if framework == "tensorflow":
        from ray.train.tensorflow import TensorflowTrainer

        return TensorflowTrainer(run_worker, **common)
    if framework == "xgboost":
        from ray.train.xgboost import XGBoostTrainer

        return XGBoostTrainer(run_worker, **common)
    raise SpecError(f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}",
                    field="trainConfig.framework")
