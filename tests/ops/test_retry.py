"""make retry: a round-trip edit of the environment file (comments and layout kept) that raises the job's run
counter, the generator's render, one commit naming the job and the reason. The new run has a new name (the
counter enters what is rendered) and the same training spec (it resumes from the same checkpoints)."""
from __future__ import annotations

import difflib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from ops import retry as retry_mod
from ops.targets import OpsError, target
from tests.ops.support import git
from tests.support import REPO, app_dir, load_yaml


def _job_files(root: Path, env: str, job: str) -> dict[str, dict]:
    return {p.name: load_yaml(p.read_text()) for p in sorted(app_dir(root, env, f"job-{job}").glob("*.yaml"))}


def _run_object(files: dict) -> dict:
    return next(d for d in files.values() if d["kind"] in ("RayJob", "PyTorchJob"))


@pytest.mark.parametrize("env,job", [("eks", "cifar10-torch"), ("eks", "fsdp-llama"), ("minikube", "digits-torch")])
def test_retry_is_one_commit_with_a_new_run_and_the_same_spec(git_repo, env, job):
    env_file = git_repo / "environments" / f"{env}.yaml"
    before_text = env_file.read_text()
    before = _job_files(git_repo, env, job)
    out = io.StringIO()
    sha = retry_mod.retry(git_repo, target(git_repo, env), job, "NCCL hang on rank 3", out=out)
    assert f"committed {sha}: retry {env}/{job} (run 1): NCCL hang on rank 3" in out.getvalue()
    assert "push it to start the new run: git push" in out.getvalue()
    assert git(git_repo, "log", "-1", "--format=%s").strip() == f"retry {env}/{job} (run 1): NCCL hang on rank 3"
    changed = git(git_repo, "show", "--name-only", "--format=", "HEAD").split()
    assert f"environments/{env}.yaml" in changed
    folder = str(app_dir(git_repo, env, f"job-{job}").relative_to(git_repo))
    assert all(f == f"environments/{env}.yaml" or f.startswith(f"{folder}/") for f in changed), changed
    assert git(git_repo, "status", "--porcelain").strip() == ""
    # the file: only added lines (the counter, and the keys that hold it), every comment where it was
    diff = [l for l in difflib.ndiff(before_text.splitlines(), env_file.read_text().splitlines()) if l[:1] in "+-"]
    assert diff and all(l.startswith("+ ") for l in diff), diff
    assert any(l.strip() == "+ run: 1" or l.endswith("run: 1") for l in diff), diff
    after = _job_files(git_repo, env, job)
    old_run, new_run = _run_object(before), _run_object(after)
    assert old_run["metadata"]["name"] != new_run["metadata"]["name"]
    assert new_run["metadata"]["name"].rsplit("-", 1)[0] == job
    assert new_run["metadata"]["annotations"]["ray-gitops/run"] == "1"
    specs = [[d["data"] for d in files.values() if d["kind"] == "ConfigMap"] for files in (before, after)]
    assert specs[0] == specs[1], "the training spec changed: the new run would not resume from its checkpoints"


def test_the_counter_goes_up_each_time_and_sits_under_the_job(git_repo):
    for expected in (1, 2, 3):
        retry_mod.retry(git_repo, target(git_repo, "eks"), "cifar10-torch", f"try {expected}", out=io.StringIO())
        assert load_yaml((git_repo / "environments/eks.yaml").read_text())["jobs"]["cifar10-torch"]["job"][
            "run"] == expected
    lines = (git_repo / "environments/eks.yaml").read_text().splitlines()
    job_line = next(i for i, l in enumerate(lines) if l.strip() == "cifar10-torch:")
    job_line += lines[job_line + 1].strip().startswith("pinnedTo:")  # its pin (environments/eks.yaml) first
    assert lines[job_line + 1].strip() == "job:" and lines[job_line + 2].strip() == "run: 3", lines[job_line:job_line + 3]
    subjects = git(git_repo, "log", "--format=%s", "-3").splitlines()
    assert subjects == [f"retry eks/cifar10-torch (run {n}): try {n}" for n in (3, 2, 1)]


def test_an_unknown_job_is_refused_naming_the_jobs(git_repo):
    with pytest.raises(OpsError) as exc:
        retry_mod.retry(git_repo, target(git_repo, "eks"), "nope", "x", out=io.StringIO())
    assert "environment eks has no job 'nope'; its jobs: cifar10-torch, digits-torch, fsdp-llama" in str(exc.value)
    assert exc.value.exit_code == 2
    assert git(git_repo, "status", "--porcelain").strip() == ""


def test_uncommitted_changes_are_refused(git_repo):
    (git_repo / "environments/eks.yaml").write_text((git_repo / "environments/eks.yaml").read_text() + "\n")
    with pytest.raises(OpsError) as exc:
        retry_mod.retry(git_repo, target(git_repo, "eks"), "cifar10-torch", "x", out=io.StringIO())
    assert "uncommitted changes" in str(exc.value)
    assert len(git(git_repo, "log", "--format=%s").splitlines()) == 1


def test_a_failed_render_leaves_the_file_apps_and_history_as_they_were(git_repo, monkeypatch, tmp_path, helm_bin):
    broken = tmp_path / "helm"  # a helm that answers `helm version` and fails to template
    broken.write_text(f"#!/bin/sh\n[ \"$1\" = version ] && exec {helm_bin} \"$@\"\n"
                      "echo 'Error: helm exploded' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("HELM", str(broken))
    with pytest.raises(OpsError) as exc:
        retry_mod.retry(git_repo, target(git_repo, "eks"), "cifar10-torch", "x", out=io.StringIO())
    assert "the render failed" in str(exc.value) and "helm exploded" in str(exc.value)
    assert git(git_repo, "status", "--porcelain").strip() == ""
    assert len(git(git_repo, "log", "--format=%s").splitlines()) == 1


def test_push_pushes_to_the_upstream(git_repo, tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    git(git_repo, "remote", "add", "origin", str(remote))
    git(git_repo, "push", "-q", "-u", "origin", "main")
    out = io.StringIO()
    sha = retry_mod.retry(git_repo, target(git_repo, "minikube"), "digits-torch", "flaky node", push=True, out=out)
    assert "pushed" in out.getvalue()
    remote_head = subprocess.run(["git", "rev-parse", "--short", "main"], cwd=remote, capture_output=True,
                                 text=True).stdout.strip()
    assert remote_head == sha


def test_the_cli_retry_prints_what_to_push(git_repo):
    proc = subprocess.run([sys.executable, "-m", "ops", "--repo", str(git_repo), "retry", "--env", "eks", "--job",
                           "fsdp-llama", "--reason", "lost a node"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "retry eks/fsdp-llama (run 1): lost a node" in proc.stdout and "git push" in proc.stdout


def test_a_push_from_another_branch_is_refused(git_repo):
    """Argo CD follows gitops.targetRevision (main): a retry pushed from a feature branch would deploy nothing."""
    git(git_repo, "switch", "-q", "-c", "feature")
    with pytest.raises(OpsError) as exc:
        retry_mod.retry(git_repo, target(git_repo, "minikube"), "digits-torch", "x", push=True, out=io.StringIO())
    assert "HEAD is 'feature', but Argo CD follows 'main'" in str(exc.value)
    assert len(git(git_repo, "log", "--format=%s").splitlines()) == 1


def test_a_push_first_brings_the_checkout_up_to_date(git_repo, tmp_path):
    """Someone pushed from another clone: this one pulls (fast-forward) first, so its commit goes on top of theirs
    instead of being refused by the remote or computing its run counter from a stale file."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    git(git_repo, "remote", "add", "origin", str(remote))
    git(git_repo, "push", "-q", "-u", "origin", "main")
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(remote), str(other)], check=True)
    env_file = other / "environments" / "eks.yaml"
    env_file.write_text(env_file.read_text() + "# a colleague's change\n")
    git(other, "-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-q", "-am", "their change")
    git(other, "push", "-q")
    retry_mod.retry(git_repo, target(git_repo, "minikube"), "digits-torch", "mine", push=True, out=io.StringIO())
    subjects = git(git_repo, "log", "--format=%s").splitlines()
    assert subjects[1:] == ["their change", "start"] and "mine" in subjects[0], subjects
    remote_head = subprocess.run(["git", "log", "-1", "--format=%s", "main"], cwd=remote, capture_output=True,
                                 text=True).stdout.strip()
    assert "mine" in remote_head
