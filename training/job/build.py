"""Stage one end to end: a spec (its file, or the mapping read from it) -> the checked, typed :class:`Job`.

The schema first (:mod:`training.job.load`), then every default once (:mod:`training.job.defaults`), then what the
schema cannot say, on the typed job (:mod:`training.job.checks`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from training.job.checks import check
from training.job.defaults import normalize
from training.job.load import check_schema, load_spec_file
from training.job.parts import Job


def build(spec: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Job:
    """The job of a spec read from its file: ``SpecError`` naming the field when the spec is not a valid one."""
    check_schema(spec)
    job = normalize(spec, environ)
    check(job)
    return job


def validate_spec(spec: Mapping[str, Any]) -> None:
    """``SpecError`` naming the first offending field of a spec, None when it is valid (what ``validate`` says)."""
    build(spec, environ={})


def load_job(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> Job:
    """Load, validate and normalize a spec file."""
    return build(load_spec_file(path), environ)
