"""Fixtures shared by every test folder."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support import HELM_MEMO_VARIABLE, REPO

# The lanes of `make test` (`make test-fast` runs neither of the slow ones): decided here from what a test uses, so
# a new test lands in the right lane without a decorator to forget.
RAY_FIXTURES = {"ray_session", "two_node_ray", "runner"}  # a local Ray, or `python -m training run` in a subprocess
GO_FIXTURES = {"argocd_cli", "kubeconform"}  # an upstream component built from its Go module (cached after once)


HELM_MEMO_MADE = pytest.StashKey[str]()


def pytest_configure(config):
    """One folder per test run (shared by its xdist workers, which inherit the variable) for the output of
    `helm template` that tests/support.run_generator reuses for an input already rendered."""
    if os.environ.get(HELM_MEMO_VARIABLE) is None:
        config.stash[HELM_MEMO_MADE] = tempfile.mkdtemp(prefix="ray-gitops-helm-memo-")
        os.environ[HELM_MEMO_VARIABLE] = config.stash[HELM_MEMO_MADE]


def pytest_unconfigure(config):
    folder = config.stash.get(HELM_MEMO_MADE, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(HELM_MEMO_VARIABLE, None)


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & RAY_FIXTURES:
            item.add_marker(pytest.mark.ray)
        if names & GO_FIXTURES:
            item.add_marker(pytest.mark.go)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Where the time of a run went, by lane (the figure CI prints beside its stages)."""
    seconds: dict = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) is None or not hasattr(report, "duration"):
                continue
            keywords = getattr(report, "keywords", {})
            lane = "ray" if "ray" in keywords else "go" if "go" in keywords else "fast"
            seconds[lane] = seconds.get(lane, 0.0) + report.duration
    if seconds:
        terminalreporter.write_line("time by lane (setup + call + teardown): " + ", ".join(
            f"{lane} {seconds[lane]:.0f} s" for lane in ("fast", "go", "ray") if lane in seconds))


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
