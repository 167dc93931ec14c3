"""Fixtures shared by every test folder."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import REPO


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def helm_bin() -> str:
    from generator import helm

    return helm.binary(REPO)


@pytest.fixture
def repo_copy(tmp_path, helm_bin, monkeypatch) -> Path:
    """A throwaway copy of the repo's inputs and apps/ (charts keep their library symlinks)."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("environments", "charts", "apps", "argocd", "health-checks", ".github"):
        if (REPO / name).exists():
            shutil.copytree(REPO / name, root / name, symlinks=True)
    monkeypatch.setenv("HELM", helm_bin)
    return root
