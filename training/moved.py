"""Where the modules of the flat layout went: their old import paths still name the moved modules.

Ray Tune keeps an experiment's callbacks and trainable by module path (``training.tune_events.Progress``,
``training.tune_trial.local_trial``), and pickles name classes by module (``training.job.Job``): an experiment
started before the move must ``--resume`` after it, and code written against the old paths keeps working. An old
path is the moved module itself, not a copy (``training.tune_events.Progress is training.tune.events.Progress``),
loaded once. ``training.job`` and ``training.tune`` took the names of old modules: their packages' faces hand on
those modules' names (``training.job.Job is training.job.parts.Job``); ``training.spec`` names ``training.job``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old module path -> the module it now is
MOVED = {
    "training.spec": "training.job",  # the package of stage one: its face hands on the old module's names
    "training.tune_spec": "training.job.search",
    "training.identity": "training.job.identity",
    "training.cluster": "training.runtime.cluster",
    "training.worker": "training.runtime.worker",
    "training.sessions": "training.runtime.sessions",
    "training.checkpointing": "training.runtime.checkpoints",
    "training.storage": "training.runtime.storage",
    "training.shared_storage": "training.runtime.shared_storage",
    "training.data": "training.runtime.data",
    "training.preflight": "training.runtime.preflight",
    "training.failures": "training.runtime.failures",
    "training.faults": "training.runtime.faults",
    "training.env": "training.runtime.env",
    "training.train_torch": "training.frameworks.pytorch",
    "training.models_torch": "training.frameworks.pytorch",
    "training.train_tf": "training.frameworks.tensorflow",
    "training.models_tf": "training.frameworks.tensorflow",
    "training.train_xgb": "training.frameworks.xgboost",
    "training.user_trainer": "training.frameworks.user",
    "training.trainers": "training.frameworks.trainer",
    "training.tune_trial": "training.tune.trial",
    "training.tune_events": "training.tune.events",
    "training.tune_summary": "training.tune.summary",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)  # the moved module itself: its name and spec stay its own

    def exec_module(self, module):
        pass  # already executed, once, under its new name


class OldPaths(importlib.abc.MetaPathFinder):
    """Resolves an old path of :data:`MOVED` to the moved module."""

    def find_spec(self, fullname, path=None, target=None):
        moved = MOVED.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(moved)) if moved else None


def install() -> None:
    if not any(isinstance(f, OldPaths) for f in sys.meta_path):
        sys.meta_path.append(OldPaths())
