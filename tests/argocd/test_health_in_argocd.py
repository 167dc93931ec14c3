"""Every health fixture, assessed by Argo CD v3.5.1 itself: `argocd admin settings resource-overrides health`
runs the health checks of the generated argocd-cm in Argo CD's own Lua engine (gopher-lua, its sandbox, its
conversion of the resource), built from the pinned module by e2e.components. The lupa runner beside this file is
a model of that engine (fast, and it drives the mutation tests); this is the engine."""
from __future__ import annotations

import subprocess

import pytest

from tests.argocd import argocd_health_lua as hl
from tests.support import REPO, load_yaml

CHECKS = hl.discover_health_checks()
CASES = [case for check in CHECKS for case in hl.load_cases(check)]
ARGOCD_CM = REPO / "argocd" / "managed" / "configmap-argocd-cm.yaml"


def assess(argocd: str, resource_path) -> tuple[str, str]:
    proc = subprocess.run([str(argocd), "admin", "settings", "resource-overrides", "health", str(resource_path),
                           "--argocd-cm-path", str(ARGOCD_CM)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"argocd failed on {resource_path}: {proc.stderr[-2000:]}"
    status = message = None
    lines = proc.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("STATUS: "):
            status = line[len("STATUS: "):]
        elif line.startswith("MESSAGE: "):
            message = "\n".join([line[len("MESSAGE: "):], *lines[i + 1:]]).strip()
            break
    assert status is not None, f"no STATUS in argocd's output: {proc.stdout}"
    return status, message or ""


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_argocd_assesses_the_fixture_as_expected(argocd_cli, case):
    status, message = assess(argocd_cli, case.fixture_path)
    assert (status, message) == (case.status, case.message)


def test_the_argocd_cm_under_test_is_the_committed_one():
    """What Argo CD is given here is what the root Application delivers (the generated argocd-cm)."""
    from generator import argocd, environments
    envs = [environments.load(REPO, name) for name in environments.names(REPO)]
    assert load_yaml(ARGOCD_CM.read_text())["data"] == argocd.health_configmap(REPO, envs)["data"]
