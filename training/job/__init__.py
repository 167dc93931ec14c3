"""Stage one: a spec's text -> the typed, immutable :class:`Job`. Imports no Ray, torch, TensorFlow or XGBoost.

``load`` reads the text and holds it against the schema, ``defaults`` gives every default once (``normalize``),
``checks`` says on the typed job what the schema cannot, ``build`` runs the three; ``parts`` is the typed job,
``search`` the search space of mode tune, ``identity`` the run name of a spec without one. ``from training.job import load_job, Job`` is the door;
it also hands on the names of the flat layout's ``training.job`` and ``training.spec`` modules (``training.spec``
names this package: see :mod:`training.moved`).
"""

from __future__ import annotations

import importlib

from training.job.parts import (
    MODEL_FIELDS,
    TRAINING_FIELDS,
    Checkpoint,
    Data,
    FrozenMap,
    Job,
    Model,
    SearchParam,
    Training,
    Tune,
    Workers,
    freeze,
    thaw,
)

_ON_USE = {  # imported on first use: importing the typed job alone (every worker does) loads no more than it needs
    "training.job.load": ("SCHEMA_DIR", "JOB_SPEC_SCHEMA", "RESULT_SCHEMA", "INVALID_SPEC_NAME", "NAME_PATTERN",
                          "load_schema", "load_spec_file", "apply_overrides"),
    "training.job.defaults": ("STORAGE_ENV", "DEFAULT_STORAGE", "normalize", "data_block"),
    "training.job.build": ("build", "validate_spec", "load_job"),
}
_WHERE = {name: module for module, names in _ON_USE.items() for name in names}
__all__ = ["MODEL_FIELDS", "TRAINING_FIELDS", "Checkpoint", "Data", "FrozenMap", "Job", "Model", "SearchParam",
           "Training", "Tune", "Workers", "freeze", "thaw", *_WHERE]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'training.job' has no attribute {name!r}")
