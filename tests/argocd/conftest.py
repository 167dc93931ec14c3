"""Shared by the tests that run Argo CD's own code: its CLI, built from the pinned module (e2e.components, cached)."""
from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="session")
def argocd_cli():
    from e2e import components
    try:
        paths = components.build(["argocd"], out=sys.stderr)
    except components.BuildError as exc:
        pytest.fail(f"cannot build Argo CD from its module (Go >= 1.26 and the module proxy are needed): {exc}")
    return paths["argocd"]
