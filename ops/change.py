"""A change to an environment the GitOps way: a round-trip edit of environments/<env>.yaml (comments and layout
kept), the generator's render of that environment, one commit of the file with its rendered output, and a push
when asked. Used by `make retry` and `make bench-cluster`."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from .targets import EXIT_BAD_INPUT, OpsError, Target


def child(parent, key):
    """parent[key] as a mapping, made (first in parent) when absent or empty. New keys go first: at the end they
    would land after a comment that belongs to the next key (ruamel keeps such a comment on the previous node)."""
    if parent.get(key) is None:
        if key in parent:
            parent[key] = CommentedMap()
        else:
            parent.insert(0, key, CommentedMap())
    return parent[key]


def set_first(mapping, key, value) -> None:
    """mapping[key] = value, a new key going first (see child)."""
    if key in mapping:
        mapping[key] = value
    else:
        mapping.insert(0, key, value)


def edit_environment(root: Path, env: str, edit: Callable[[CommentedMap], None]) -> Path:
    """Load environments/<env>.yaml round-trip, let `edit` change the document, write it back."""
    from generator.bump_image import round_trip_yaml
    path = root / "environments" / f"{env}.yaml"
    yaml = round_trip_yaml()
    doc = yaml.load(path.read_text())
    if doc is None:
        doc = CommentedMap()
    edit(doc)
    out = io.StringIO()
    yaml.dump(doc, out)
    path.write_text(out.getvalue())
    return path


def _run(cmd: list[str], root: Path, what: str, env: dict | None = None) -> str:
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise OpsError(f"{what} failed:\n{(proc.stderr or proc.stdout).strip()}", 1)
    return proc.stdout


def _render_env() -> dict:
    """The generator's environment: this project's helm unless $HELM names one."""
    env = dict(os.environ)
    if not env.get("HELM"):
        from generator import helm
        from generator.errors import RenderError
        try:
            env["HELM"] = helm.binary()
        except RenderError:
            pass  # the render says what is missing
    return env


def _on_the_followed_branch(root: Path, target: Target) -> None:
    """A pushed change goes where Argo CD looks: refuse unless HEAD is the branch the environment's Argo CD follows
    (gitops.targetRevision), and bring it up to date first (git pull --ff-only), so the run counter and the render
    start from what is pushed already, not from a stale checkout."""
    followed = str(((target.doc.get("gitops") or {}).get("targetRevision")) or "main")
    branch = _run(["git", "rev-parse", "--abbrev-ref", "HEAD"], root, "git rev-parse").strip()
    if branch != followed:
        raise OpsError(f"HEAD is {branch!r}, but Argo CD follows {followed!r} (gitops.targetRevision of environment "
                       f"{target.env}): a push from here would not deploy; check out {followed} (git switch "
                       f"{followed}) or push without PUSH=1", EXIT_BAD_INPUT)
    upstream = subprocess.run(["git", "rev-parse", "--abbrev-ref", "@{upstream}"], cwd=root, capture_output=True,
                              text=True)
    if upstream.returncode == 0:
        _run(["git", "pull", "-q", "--ff-only"], root, f"git pull --ff-only ({branch} has diverged from "
                                                       f"{upstream.stdout.strip()}: rebase or merge it first)")


def commit_change(root: Path, target: Target, edit: Callable[[CommentedMap], None], message: str,
                  push: bool = False, out=sys.stdout, pushed_note: str = "Argo CD applies it",
                  push_hint: str = "apply it") -> str:
    """Edit, render, commit (and push) one environment's change. Returns the short commit. The checkout must have
    no uncommitted changes under environments/, apps/, argocd/ (the commit holds this change alone); a failed
    render leaves apps/ as it was (the generator's promise) and the environment file goes back too."""
    if _run(["git", "status", "--porcelain", "--", "environments", "apps", "argocd"], root, "git status").strip():
        raise OpsError("environments/, apps/ or argocd/ have uncommitted changes: commit or stash them first, so the "
                       "commit holds this change alone", EXIT_BAD_INPUT)
    if push:
        _on_the_followed_branch(root, target)
    path = root / "environments" / f"{target.env}.yaml"
    before = path.read_text()
    edit_environment(root, target.env, edit)
    try:
        _run([sys.executable, "-m", "generator", "--root", str(root), "render", "--env", target.env], root,
             "the render", _render_env())
    except OpsError:
        path.write_text(before)
        raise
    _run(["git", "add", "--", str(path.relative_to(root)), f"apps/{target.env}", "argocd"], root, "git add")
    _run(["git", "commit", "-q", "-m", message], root, "git commit")
    sha = _run(["git", "rev-parse", "--short", "HEAD"], root, "git rev-parse").strip()
    print(f"committed {sha}: {message}", file=out)
    if push:
        _run(["git", "push", "-q"], root, "git push")
        print(f"pushed: {pushed_note}", file=out)
    else:
        print(f"push it to {push_hint}: git push", file=out)
    return sha
