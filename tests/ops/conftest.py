"""A git repository made from this checkout's inputs, for the commands that edit, render and commit."""
from __future__ import annotations

import pytest

from tests.ops.support import git


@pytest.fixture
def git_repo(repo_copy):
    """repo_copy (environments, charts, apps, argocd) as a git repository with one commit and an identity."""
    git(repo_copy, "init", "-q", "-b", "main")
    git(repo_copy, "config", "user.name", "ops-test")
    git(repo_copy, "config", "user.email", "ops-test@ray-gitops.invalid")
    git(repo_copy, "add", "-A")
    git(repo_copy, "commit", "-q", "-m", "start")
    return repo_copy
