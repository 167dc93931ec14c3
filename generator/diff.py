"""The rendered difference between a base git ref and the working tree, for review.

Both sides are rendered fresh: the base in a temporary git worktree, by the base's own generator (so the diff
is right even when the base's committed apps/ was stale), the working tree by this one. Resources are compared
as data, so key order and formatting are never a difference. Output is grouped environment -> app -> resource,
with a summary (added / changed / removed per environment), as plain text or as markdown for a PR comment.
"""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import argocd, environments, helm, manifests, render
from .environments import CLUSTERS
from .errors import RenderError


@dataclass
class Change:
    env: str
    app: str
    resource: str          # file name: <kind>-<name>.yaml
    status: str            # added | changed | removed
    diff: list = field(default_factory=list)


def _load_tree(root: Path) -> dict:
    """{(env, app, file): data} of a rendered apps tree (argocd/'s generated files as environment 'argocd'); an app
    rendered per cluster is the app `clusters/<cluster>/<app>`."""
    out = {}
    for path in sorted([*root.glob("*/*/*.yaml"), *root.glob(f"*/{CLUSTERS}/*/*/*.yaml")]):
        env, *app, name = path.relative_to(root).parts
        out[(env, "/".join(app), name)] = manifests.load(path.read_text())
    return out


def _load_rendered(out: Path) -> dict:
    """A rendered repository-shaped tree (out/apps, out/argocd); an older generator wrote apps at the top."""
    apps = out / "apps" if (out / "apps").is_dir() else out
    tree = _load_tree(apps)
    argocd_dir = out / "argocd"
    for rel, text in argocd.generated_files(argocd_dir).items():
        parts = Path(rel).parts
        tree[("argocd", parts[0] if len(parts) > 1 else ".", parts[-1])] = manifests.load(text)
    return tree


def _canonical(doc) -> list[str]:
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, width=120).splitlines(keepends=True)


_RUN_HASH = re.compile(r"-[0-9a-f]{8}(?=(-spec|-ingress)?\.yaml$)")  # a run's job, its spec, its NetworkPolicy


def _pair_runs(a: dict, b: dict) -> dict:
    """A job's run hash changes with its spec: pair the old run's file with the new run's (same env, app, kind)."""
    def runs(tree, other):
        out = {}
        for env, app, name in tree:
            if (env, app, name) not in other and _RUN_HASH.search(name):
                out.setdefault((env, app, _RUN_HASH.sub("", name)), []).append(name)
        return out
    old, new = runs(a, b), runs(b, a)
    pairs = {}
    for key in old.keys() & new.keys():
        if len(old[key]) == 1 and len(new[key]) == 1:
            pairs[(key[0], key[1], old[key][0])] = (key[0], key[1], new[key][0])
    return pairs


def compare(base: Path, head: Path) -> list[Change]:
    """Semantic comparison of two rendered trees."""
    a, b = _load_rendered(base), _load_rendered(head)
    pairs = _pair_runs(a, b)
    changes = []
    for old, new in pairs.items():
        label_old, label_new = f"apps/{old[0]}/{old[1]}/{old[2]}", f"apps/{new[0]}/{new[1]}/{new[2]}"
        # the run hash itself is in the header; inside, show only what changed besides it
        old_hash, new_hash = _RUN_HASH.search(old[2]).group(0), _RUN_HASH.search(new[2]).group(0)
        before = [line.replace(old_hash, new_hash) for line in _canonical(a[old])]
        changes.append(Change(new[0], new[1], f"{old[2]} -> {new[2]} (a new run)", "changed",
                              list(difflib.unified_diff(before, _canonical(b[new]), label_old, label_new))))
    paired = set(pairs) | set(pairs.values())
    for key in sorted(set(a) | set(b)):
        if key in paired:
            continue
        env, app, name = key
        label = f"argocd/{app}/{name}".replace("/./", "/") if env == "argocd" else f"apps/{env}/{app}/{name}"
        if key not in a:
            changes.append(Change(env, app, name, "added", list(difflib.unified_diff([], _canonical(b[key]), "/dev/null", label))))
        elif key not in b:
            changes.append(Change(env, app, name, "removed", list(difflib.unified_diff(_canonical(a[key]), [], label, "/dev/null"))))
        elif a[key] != b[key]:
            changes.append(Change(env, app, name, "changed",
                                  list(difflib.unified_diff(_canonical(a[key]), _canonical(b[key]), label, label))))
    return sorted(changes, key=lambda c: (c.env != "argocd", c.env, c.app, c.resource))


def summary(changes: list[Change], envs: list[str]) -> dict:
    table = {env: {"added": 0, "changed": 0, "removed": 0} for env in envs}
    for c in changes:
        table.setdefault(c.env, {"added": 0, "changed": 0, "removed": 0})[c.status] += 1
    return table


def format_text(changes: list[Change], envs: list[str], base_ref: str) -> str:
    lines = [f"Rendered diff: {base_ref} -> working tree", ""]
    for env, counts in summary(changes, envs).items():
        lines.append(f"  {env:<16} {counts['added']:>3} added  {counts['changed']:>3} changed  {counts['removed']:>3} removed")
    if not changes:
        lines += ["", "No rendered change."]
    current = (None, None)
    for c in changes:
        if c.env != current[0]:
            lines += ["", f"== {c.env} =="]
        if (c.env, c.app) != current:
            lines.append(f"-- {c.app}")
            current = (c.env, c.app)
        lines.append(f"   {c.status}: {c.resource}")
        lines += ["      " + l.rstrip("\n") for l in c.diff]
    return "\n".join(lines) + "\n"


# A GitHub comment holds 65536 characters; what the pull-request workflow posts stays under this.
COMMENT_LIMIT = 60000


def format_markdown(changes: list[Change], envs: list[str], base_ref: str, max_chars: int | None = None) -> str:
    """The PR comment. With max_chars, whole resources are shown while they fit; the rest are listed by name (the
    full diff is in the job log): never a resource, a line or a code fence cut in the middle."""
    out = [f"### Rendered diff: `{base_ref}` → this branch", "",
           "| environment | added | changed | removed |", "| --- | ---: | ---: | ---: |"]
    for env, counts in summary(changes, envs).items():
        out.append(f"| {env} | {counts['added']} | {counts['changed']} | {counts['removed']} |")
    if not changes:
        out += ["", "No rendered change."]
    text = "\n".join(out) + "\n"
    budget = None if max_chars is None else max_chars - 2000  # room for the list of what was left out
    left_out: list[Change] = []
    current = (None, None)
    for c in changes:
        block = []
        if c.env != current[0]:
            block += ["", f"#### {c.env}"]
        if (c.env, c.app) != current:
            block += ["", f"**{c.app}**", ""]
        block += [f"<details><summary>{c.status}: <code>{c.resource}</code></summary>", "", "```diff",
                  *[l.rstrip("\n") for l in c.diff], "```", "</details>"]
        chunk = "\n".join(block) + "\n"
        if left_out or (budget is not None and len(text) + len(chunk) > budget):
            left_out.append(c)
            continue
        text += chunk
        current = (c.env, c.app)
    if left_out:
        names = [f"`{c.env}/{c.app}/{c.resource}` ({c.status})" for c in left_out]
        note = ["", f"**{len(left_out)} more resource(s) not shown** (the comment's size limit); the full diff is in "
                     f"the job's log, or run `make diff BASE={base_ref}`:", ""]
        listed: list[str] = []
        used = len(text) + sum(len(x) + 3 for x in note)
        for name in names:
            if budget is not None and used + len(name) > max_chars - 100:
                listed.append(f"- … and {len(names) - len(listed)} more")
                break
            listed.append(f"- {name}")
            used += len(listed[-1]) + 3
        text += "\n".join(note + listed) + "\n"
    return text


def render_ref(repo: Path, ref: str, dest: Path) -> None:
    """Render `ref` of `repo` into `dest`, in a temporary worktree, with that ref's own generator."""
    with tempfile.TemporaryDirectory(prefix="diff-base-") as tmp:
        worktree = Path(tmp) / "wt"
        proc = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(worktree), ref],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RenderError(f"cannot check out base ref {ref!r}: {proc.stderr.strip()}")
        try:
            if not (worktree / "generator").is_dir() or not (worktree / "environments").is_dir():
                dest.mkdir(parents=True, exist_ok=True)  # before the generator existed: nothing was rendered
                return
            environ = dict(os.environ, HELM=helm.binary())  # the worktree has no .tools of its own
            proc = subprocess.run([sys.executable, "-m", "generator", "--root", str(worktree), "render", "--out",
                                   str(dest)], capture_output=True, text=True, cwd=worktree, env=environ)
            if proc.returncode != 0:
                raise RenderError(f"rendering base ref {ref!r} failed:\n{proc.stderr.strip()}")
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(worktree)],
                           capture_output=True, text=True)


def rendered_diff(repo: Path, base_ref: str, fmt: str, max_chars: int | None = None) -> tuple[str, list[Change]]:
    with tempfile.TemporaryDirectory(prefix="diff-") as tmp:
        base, head = Path(tmp) / "base", Path(tmp) / "head"
        render_ref(repo, base_ref, base)
        render.render(repo, None, head)
        changes = compare(base, head)
        envs = sorted({c.env for c in changes} | set(environments.names(repo)))
    if fmt == "markdown":
        text = format_markdown(changes, envs, base_ref, max_chars)
    else:
        text = format_text(changes, envs, base_ref)
    return text, changes
