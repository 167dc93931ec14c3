"""The Ray Train trainer of a job (Ray Train V2, Ray 2.60): the framework's own (its registry entry's
``ray_trainer``) with this package's run config.

Every trainer runs :func:`training.runtime.worker.run_worker` on its workers with the trainer function: the
framework's built-in loop or the user's (``trainConfig.trainerPath``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from training.frameworks import registry
from training.job.parts import Job, Workers
from training.runtime.faults import NO_HOOKS, TestHooks

#: ``config.healthCheck`` -> Ray Train's own settings. Ray Train reads them from the driver's environment and passes
#: them on to its controller and workers (``ray.train.v2``'s list of variables to propagate).
HEALTH_CHECK_ENV = {
    "intervalSeconds": "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S",
    "workerTimeoutSeconds": "RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S",
    "workerGroupStartTimeoutSeconds": "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S",
}


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

    from training.runtime.worker import run_worker

    framework = registry.get(job.training.framework)
    fn = user_fn if user_fn is not None else framework.loop
    config: dict[str, Any] = {"job": job, "fn": fn, "user": user_fn is not None, "hooks": hooks,
                              "worker_env": dict(framework.worker_env)}
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
        worker_runtime_env={"env_vars": dict(framework.worker_env)} if framework.worker_env else None,
    )
    return framework.ray_trainer(run_worker, job, train_loop_config=config,
                                 scaling_config=scaling_config(job.workers), run_config=run_config)
