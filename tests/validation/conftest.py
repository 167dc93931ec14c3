"""Shared fixtures for the validation tests.

CRDs come from $RAY_GITOPS_SCHEMA_LOCATION, or ``<repo>/../shared/crds`` (read in place, never copied).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from tests.support import go_module_dir
from tests.validation.support import FIXTURES, KUEUE, crd_location
from validation import module_crds


@pytest.fixture(scope="session")
def crds() -> Path:
    location = crd_location()
    if not any(location.rglob("*.yaml")):
        pytest.fail(f"no CRDs under {location}: set RAY_GITOPS_SCHEMA_LOCATION to a directory of CRD YAML files "
                    f"(e.g. ../shared/crds)")
    return location


@pytest.fixture
def make_env(tmp_path):
    """Copy fixture files into ``<tmp>/apps/<env>/app/`` and return that apps/<env> directory."""

    def make(*files: Path | str, env: str = "test") -> Path:
        target = tmp_path / "apps" / env / "app"
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            f = FIXTURES / f if not Path(f).is_absolute() else Path(f)
            shutil.copy(f, target / f.name)
        return target.parent

    return make


@pytest.fixture
def fake_kubeconform(tmp_path, monkeypatch):
    """Put a fake ``kubeconform`` (tests/validation/fixtures/fake_kubeconform.py) first on PATH.

    Returns the path of the JSON file where the fake records its argv and the schema files it was given.
    """
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "kubeconform"
    wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{FIXTURES / 'fake_kubeconform.py'}' \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    record = tmp_path / "kubeconform-call.json"
    monkeypatch.setenv("FAKE_KUBECONFORM_RECORD", str(record))
    return record


@pytest.fixture
def no_kubeconform(tmp_path, monkeypatch):
    """No kubeconform anywhere: an empty PATH, and no e2e build of it under the repository (make e2e-build puts one
    in .cache/e2e, which find_kubeconform also looks at)."""
    from validation import kubeconform

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(kubeconform, "BUILT_GLOB", "no-e2e-build-here/tools-*/kubeconform")


@pytest.fixture(scope="session")
def kueue_module() -> Path:
    """The pinned Kueue module's directory in Go's module cache (the test fails with Go's message without it)."""
    return go_module_dir(KUEUE.module, KUEUE.version)


@pytest.fixture
def kueue_crd_dir(kueue_module) -> Path:
    return kueue_module / KUEUE.directory


@pytest.fixture
def fresh_module_crds():
    """Validation asks Go again (its answer is kept per process), before and after the test."""
    module_crds.forget()
    yield
    module_crds.forget()


@pytest.fixture
def no_go(tmp_path, monkeypatch, fresh_module_crds):
    """No `go` on PATH (an empty PATH): Kueue's CRDs cannot come from Go's module cache."""
    empty = tmp_path / "no-go-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("go") is None


@pytest.fixture
def go_offline_empty_cache(tmp_path, monkeypatch, fresh_module_crds):
    """Go is there, but with an empty module cache and no module proxy: `go mod download` fails."""
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "empty-gomodcache"))
    monkeypatch.setenv("GOPROXY", "off")
    monkeypatch.setenv("GOFLAGS", "-modcacherw")
