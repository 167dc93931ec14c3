"""Distributed training on Ray Train: one job spec in, one result JSON out.

Entry point: ``python -m training run <spec.yaml>`` (see docs/training.md). The package is arranged by stage:
``spec/`` (text -> the typed job), ``runtime/`` (what every run and worker needs, framework-agnostic),
``frameworks/`` (one module per framework, and the registry the rest asks), ``tune/`` (mode tune), ``bench/``
(the benchmarks as a library); ``runner.py`` runs a job and ``result.py`` writes its result.
User trainers (``trainConfig.trainerPath``) receive a :class:`training.WorkerContext`.

Importing this package is cheap: Ray, torch and TensorFlow are imported only where they are used.
"""

from training import moved

moved.install()  # the modules' old paths (training.job, training.tune_events, ...) name the moved modules

__version__ = "0.1.0"

__all__ = ["WorkerContext", "__version__"]


def __getattr__(name: str):
    if name == "WorkerContext":  # imported on first use: the context module brings numpy along
        from training.runtime.worker import WorkerContext

        return WorkerContext
    raise AttributeError(f"module 'training' has no attribute {name!r}")
