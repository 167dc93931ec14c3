"""Constants shared by the validation tests (imported by name; conftest.py only holds fixtures)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
KUBE_VERSION = "1.34.0"


def crd_location() -> Path:
    """$RAY_GITOPS_SCHEMA_LOCATION, or <repo>/../shared/crds (read in place, never copied)."""
    return Path(os.environ.get("RAY_GITOPS_SCHEMA_LOCATION") or REPO_ROOT.parent / "shared" / "crds")
