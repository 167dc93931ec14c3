"""The frameworks, each one :class:`Framework`: what the rest of the package asks instead of naming one.

A framework module (``pytorch``, ``tensorflow``, ``xgboost``) holds its loop, its model and its ``FRAMEWORK`` entry;
its heavy libraries are imported inside its functions, so asking the registry for a default or a metric (the spec
stage does, before Ray) imports none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from training.errors import SpecError
from training.frameworks import pytorch, tensorflow, xgboost
from training.frameworks.base import Framework

FRAMEWORKS: Mapping[str, Framework] = MappingProxyType(
    {f.name: f for f in (pytorch.FRAMEWORK, tensorflow.FRAMEWORK, xgboost.FRAMEWORK)})
DEFAULT = "pytorch"  # trainConfig.framework when the spec leaves it out


def names() -> tuple[str, ...]:
    return tuple(FRAMEWORKS)


def get(name: str) -> Framework:
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise SpecError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORKS)}",
                        field="trainConfig.framework") from None
