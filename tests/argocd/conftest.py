"""Shared by the tests that run Argo CD's own code: its CLI, built from the pinned module (e2e.components, cached)."""
from __future__ import annotations

import pytest

from tests.support import built_binary


@pytest.fixture(scope="session")
def argocd_cli():
    return built_binary("argocd", "argocd", "Argo CD")
