"""Fixtures shared by every test folder."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
    for name in ("environments", "charts", "apps", "argocd"):
        if (REPO / name).exists():
            shutil.copytree(REPO / name, root / name, symlinks=True)
    monkeypatch.setenv("HELM", helm_bin)
    return root


def run_generator(root: Path, *args, env=None) -> subprocess.CompletedProcess:
    environ = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "generator", "--root", str(root), *args], cwd=REPO,
                          capture_output=True, text=True, env=environ)


def tree_digest(path: Path) -> dict:
    """{relative path: sha256} of every file under `path` (an absent tree is {})."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}
