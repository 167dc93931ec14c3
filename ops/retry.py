"""make retry: the GitOps retry. A job's `run` counter (jobs.<job>.job.run in the environment's file, a
round-trip edit that keeps comments and layout) goes up by one; the job's charts render it onto the RayJob /
PyTorchJob, so what is rendered changes, and so does the run's name (<job>-<hash>): Argo CD creates the new run and
prunes the old one. The training spec's name is unchanged, so the new run resumes from the job's checkpoints. The
re-render is the generator's (`python -m generator render --env`), then one commit naming the job and the reason;
`--push` pushes it."""
from __future__ import annotations

import sys
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from . import change
from .targets import EXIT_BAD_INPUT, OpsError, Target


def current_run(target: Target, job: str) -> int:
    entry = (target.doc.get("jobs") or {}).get(job)
    if not entry:
        known = ", ".join(sorted(target.doc.get("jobs") or {})) or "none"
        raise OpsError(f"environment {target.env} has no job {job!r}; its jobs: {known}", EXIT_BAD_INPUT)
    return int((entry.get("job") or {}).get("run") or 0)


def bump_run(root: Path, target: Target, job: str) -> tuple[Path, int]:
    """Write jobs.<job>.job.run = current + 1 into environments/<env>.yaml; returns (file, new run)."""
    new = current_run(target, job) + 1
    path = change.edit_environment(root, target.env, lambda doc: _set_run(doc, job, new))
    return path, new


def _set_run(doc, job: str, run: int) -> None:
    if doc.get("jobs") is None:
        doc["jobs"] = CommentedMap()  # a new top-level key goes last, after the file's own
    change.set_first(change.child(change.child(doc["jobs"], job), "job"), "run", run)


def retry(root: Path, target: Target, job: str, reason: str, push: bool = False, out=sys.stdout) -> str:
    """Edit, render, commit (and push). Returns the commit."""
    new = current_run(target, job) + 1
    return change.commit_change(root, target, lambda doc: _set_run(doc, job, new),
                                f"retry {target.env}/{job} (run {new}): {reason}", push=push, out=out,
                                pushed_note="Argo CD creates the new run and prunes the old one",
                                push_hint="start the new run")
