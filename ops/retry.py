"""make retry: the GitOps retry. A job's `run` counter (jobs.<job>.job.run in the environment's file, a
round-trip edit that keeps comments and layout) goes up by one; the job's charts render it onto the RayJob /
PyTorchJob, so what is rendered changes, and so does the run's name (<job>-<hash>): Argo CD creates the new run and
prunes the old one. The training spec's name is unchanged, so the new run resumes from the job's checkpoints. The
re-render is the generator's (`python -m generator render --env`), then one commit naming the job and the reason;
`--push` pushes it."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from .targets import EXIT_BAD_INPUT, OpsError, Target


def current_run(target: Target, job: str) -> int:
    entry = (target.doc.get("jobs") or {}).get(job)
    if not entry:
        known = ", ".join(sorted((target.doc.get("jobs") or {}))) or "none"
        raise OpsError(f"environment {target.env} has no job {job!r}; its jobs: {known}", EXIT_BAD_INPUT)
    return int((entry.get("job") or {}).get("run") or 0)


def bump_run(root: Path, target: Target, job: str) -> tuple[Path, int]:
    """Write jobs.<job>.job.run = current + 1 into environments/<env>.yaml; returns (file, new run)."""
    new = current_run(target, job) + 1
    path = root / "environments" / f"{target.env}.yaml"
    from generator.bump_image import round_trip_yaml
    yaml = round_trip_yaml()
    doc = yaml.load(path.read_text())
    if doc is None:
        doc = CommentedMap()
    # New keys go first in their mapping: at the end they would land after a comment that belongs to the next
    # key (ruamel keeps such a comment on the previous node).
    if doc.get("jobs") is None:
        doc["jobs"] = CommentedMap()  # a new top-level key goes last, after the file's own
    jobs = doc["jobs"]
    entry = _child(jobs, job)
    settings = _child(entry, "job")
    if "run" in settings:
        settings["run"] = new
    else:
        settings.insert(0, "run", new)
    out = io.StringIO()
    yaml.dump(doc, out)
    path.write_text(out.getvalue())
    return path, new


def _child(parent, key):
    """parent[key] as a mapping, made (first in parent) when absent or empty."""
    if parent.get(key) is None:
        if key in parent:
            parent[key] = CommentedMap()
        else:
            parent.insert(0, key, CommentedMap())
    return parent[key]


def target_after_retry(root: Path, target: Target) -> Target:
    """The environment as it is now in the checkout (after an earlier retry raised the counter)."""
    from .targets import target as load_target
    return load_target(root, target.env, target.kubeconfig)


def _run(cmd: list[str], root: Path, what: str, env: dict | None = None) -> str:
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise OpsError(f"{what} failed:\n{(proc.stderr or proc.stdout).strip()}", 1)
    return proc.stdout


def _render_env() -> dict:
    """The generator's environment: this project's helm unless $HELM names one."""
    import os
    env = dict(os.environ)
    if not env.get("HELM"):
        from generator import helm
        from generator.errors import RenderError
        try:
            env["HELM"] = helm.binary()
        except RenderError:
            pass  # the render says what is missing
    return env


def retry(root: Path, target: Target, job: str, reason: str, push: bool = False, out=sys.stdout) -> str:
    """Edit, render, commit (and push). Returns the commit."""
    if _run(["git", "status", "--porcelain", "--", "environments", "apps", "argocd"], root, "git status").strip():
        raise OpsError("environments/, apps/ or argocd/ have uncommitted changes: commit or stash them first, so the "
                       "retry commit holds the retry alone", EXIT_BAD_INPUT)
    path = root / "environments" / f"{target.env}.yaml"
    before = path.read_text()
    path, new = bump_run(root, target, job)
    try:
        _run([sys.executable, "-m", "generator", "--root", str(root), "render", "--env", target.env], root, "the render",
             _render_env())
    except OpsError:
        path.write_text(before)  # the render left apps/ as it was; the environment file goes back too
        raise
    _run(["git", "add", "--", str(path.relative_to(root)), f"apps/{target.env}", "argocd"], root, "git add")
    message = f"retry {target.env}/{job} (run {new}): {reason}"
    _run(["git", "commit", "-q", "-m", message], root, "git commit")
    sha = _run(["git", "rev-parse", "--short", "HEAD"], root, "git rev-parse").strip()
    print(f"committed {sha}: {message}", file=out)
    if push:
        _run(["git", "push", "-q"], root, "git push")
        print("pushed: Argo CD creates the new run and prunes the old one", file=out)
    else:
        print("push it to start the new run: git push", file=out)
    return sha
