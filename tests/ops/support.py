"""Helpers of the ops tests: git in a test repository, with an identity."""
from __future__ import annotations

import subprocess

GIT_IDENTITY = ["-c", "user.name=ops-test", "-c", "user.email=ops-test@ray-gitops.invalid"]


def git(root, *args) -> str:
    proc = subprocess.run(["git", *GIT_IDENTITY, *args], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
