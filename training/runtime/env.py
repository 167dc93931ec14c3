"""Process environment for quiet, predictable Ray runs.

Must run before ``ray`` (and TensorFlow) are imported: Ray reads several of these at import or at ``ray.init()``,
and the local Ray started by :mod:`training.runtime.cluster` passes the driver's environment on to its workers.
Values already set by the user win (``setdefault``).
"""

from __future__ import annotations

import os

#: Defaults applied to the driver and (through the local raylet, or the image's ENV on a cluster) to the workers.
QUIET_DEFAULTS = {
    # Ray Train V2 migration warnings and the print patch that doubles every worker print.
    "RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS": "0",
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    # Show each worker's lines (the per-epoch progress of rank 0 must not be folded away).
    "RAY_DEDUP_LOGS": "0",
    # ray.train.report() waits for the controller's poll; 2 s by default makes every report cost ~2 s.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    # TensorFlow: MultiWorkerMirroredStrategy needs tf-keras (Keras 2); Keras 3 fails under MWMS.
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # Ray's usage-stats prompt/upload: nothing leaves the machine.
    "RAY_USAGE_STATS_ENABLED": "0",
    "PYTHONUNBUFFERED": "1",
}

def apply_quiet_defaults() -> None:
    for key, value in QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
