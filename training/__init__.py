"""Distributed training on Ray Train: one job spec in, one result JSON out.

Entry point: ``python -m training run <spec.yaml>`` (see docs/training.md).
User trainers (``trainConfig.trainerPath``) receive a :class:`training.worker.WorkerContext`.

Importing this package is cheap: Ray, torch and TensorFlow are imported only where they are used.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
