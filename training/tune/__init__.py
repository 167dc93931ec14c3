"""``mode: tune``: the search (``driver``), what runs in each trial (``trial``), what the driver hears of the trials
(``events``) and the result it writes (``summary``). Reaches the frameworks only through their registry. This face
hands on the names of the old ``training.tune`` module."""

from __future__ import annotations

import importlib

_DRIVER = ("DRIVER_MEMORY", "experiment_exists", "check_resume", "domain", "param_space", "make_scheduler",
           "trial_resources", "check_trial_fits", "run_experiment")
__all__ = list(_DRIVER)


def __getattr__(name: str):
    if name in _DRIVER:  # on first use: a trial's process imports training.tune.trial without the driver
        return getattr(importlib.import_module("training.tune.driver"), name)
    raise AttributeError(f"module 'training.tune' has no attribute {name!r}")
