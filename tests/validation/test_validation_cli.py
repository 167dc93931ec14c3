"""The command line: python -m validation manifests | policy | fetch-schemas."""

from __future__ import annotations

import subprocess
import sys

from tests.support import load_yaml
from tests.validation.support import FIXTURES, REPO_ROOT
from validation.cli import main

GOOD = FIXTURES / "apps" / "good"


def test_manifests_ok(crds, capsys, no_kubeconform):
    code = main(["manifests", "--apps-dir", str(GOOD), "--env", "good", "--kube-version", "1.34.0",
                 "--schema-location", str(crds)])
    assert code == 0
    assert capsys.readouterr().out.splitlines()[0] == "good: 17 resources checked, 17 valid, 0 invalid, 0 skipped"


def test_manifests_invalid_exit_1(crds, capsys, no_kubeconform):
    code = main(["manifests", "--apps-dir", str(FIXTURES / "schema" / "invalid"), "--kube-version", "1.34.0",
                 "--schema-location", str(crds)])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("invalid: 17 resources checked, 0 valid, 16 invalid, 1 skipped\n")


def test_manifests_kube_version_from_environment_file(crds, capsys, no_kubeconform):
    code = main(["manifests", "--apps-dir", str(GOOD), "--facts-from", str(FIXTURES / "environments" / "good.yaml"),
                 "--schema-location", str(crds)])
    assert code == 0


def test_manifests_missing_schemas_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_GITOPS_SCHEMA_LOCATION", raising=False)
    code = main(["manifests", "--apps-dir", str(GOOD), "--kube-version", "1.34.0",
                 "--schema-location", str(tmp_path / "none")])
    assert code == 2
    assert "make schemas" in capsys.readouterr().err


def test_policy_flags(capsys):
    assert main(["policy", "--apps-dir", str(GOOD), "--env", "good", "--gpu-nodes", "--efa-nodes"]) == 0
    assert capsys.readouterr().out.strip() == "good: policies OK (12 rules checked)"
    assert main(["policy", "--apps-dir", str(GOOD), "--env", "cpu", "--no-gpu-nodes"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("gpu-only-on-gpu-env: ") and "cpu: 3 policy violation(s)" in out


def test_policy_facts_from_and_environment_file(capsys):
    env = FIXTURES / "environments"
    assert main(["policy", "--apps-dir", str(GOOD), "--facts-from", str(env / "good.yaml")]) == 0
    capsys.readouterr()
    assert main(["policy", "--apps-dir", str(GOOD), "--facts-from", str(env / "good.yaml"),
                 "--environment-file", str(env / "leaky.yaml")]) == 1
    assert "leaky.yaml: huggingFace.token:" in capsys.readouterr().out


def test_policy_dashboard_opt_in(capsys):
    apps = FIXTURES / "policy" / "dashboard-not-exposed"
    assert main(["policy", "--apps-dir", str(apps), "--gpu-nodes"]) == 1
    assert main(["policy", "--apps-dir", str(apps), "--gpu-nodes", "--allow-dashboard-exposure"]) == 0


def test_fetch_schemas_offline_exit_2(tmp_path, capsys):
    code = main(["fetch-schemas", "--dest", str(tmp_path / "c"), "--base-url", (tmp_path / "nothing").as_uri()])
    assert code == 2
    assert "could not download" in capsys.readouterr().err


def test_module_entry_point(crds):
    proc = subprocess.run([sys.executable, "-m", "validation", "policy", "--list-rules"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == [
        "resources-required", "image-pinned", "no-plaintext-secrets", "gpu-only-on-gpu-env", "efa-complete", "efa-image",
        "efa-only-on-efa-env", "dashboard-not-exposed", "readonly-root-scratch", "network-policy",
        "checkpoint-storage-shared", "workload-namespaced-only"]


def test_facts_from_a_repository_environment_are_the_composed_ones(capsys):
    """environments/eks.yaml alone has no kubernetesVersion (base.yaml has it): the generator's loader composes it."""

    from validation.cli import _facts_from
    assert "kubernetesVersion" not in (load_yaml((REPO_ROOT / "environments" / "eks.yaml").read_text()) or {})
    base = load_yaml((REPO_ROOT / "environments" / "base.yaml").read_text())
    facts = _facts_from(REPO_ROOT / "environments" / "eks.yaml")
    assert facts.kubernetes_version == base["kubernetesVersion"] and facts.gpu_nodes and facts.efa_nodes
    assert main(["policy", "--apps-dir", str(REPO_ROOT / "apps" / "eks"), "--facts-from",
                 str(REPO_ROOT / "environments" / "eks.yaml")]) == 0
    assert "eks: policies OK" in capsys.readouterr().out


def test_validate_and_lint_run_from_the_validation_side_and_name_an_unknown_environment():
    proc = subprocess.run([sys.executable, "-m", "validation", "lint", "--env", "nope"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "nope" in proc.stderr and "eks" in proc.stderr and "Traceback" not in proc.stderr


def test_the_generator_never_imports_validation():
    """Data flows one way: environments + charts -> generator -> apps/; validation reads what the generator makes."""
    import ast
    offenders = []
    for path in sorted((REPO_ROOT / "generator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(REPO_ROOT)}:{node.lineno} {n}" for n in names
                          if n == "validation" or n.startswith("validation.")]
    assert offenders == []
