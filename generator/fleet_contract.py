"""The consistency contract of an environment on several clusters (generator/fleet_contract.yaml, docs/fleet.md).

A cluster's entry under `clusters:` holds only its `target` and its own `vars` (the schema's part of the contract);
those vars reach other values through templates. This module compares the composed environments of the clusters
value by value: a value that differs must be one the contract says may differ (subnets, quotas, instance types),
else the render fails before anything is written, located at the cluster's var that made the difference (its
file:line) with the value it changed and why that value is one on every cluster.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

from .errors import Location, RenderError, RenderErrors, dotted
from .manifests import load as read_yaml

CONTRACT = Path(__file__).with_name("fleet_contract.yaml")
_VAR = re.compile(r"\bvars\.([A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=1)
def contract() -> dict:
    return read_yaml(CONTRACT.read_text())


def matches(pattern, path: tuple) -> bool:
    """Does the key path match the pattern ("*": one key or index, "**": any number of them)?"""
    pattern = tuple(pattern)
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(matches(rest, path[i:]) for i in range(len(path) + 1))
    return bool(path) and (head == "*" or str(path[0]) == str(head)) and matches(rest, path[1:])


def rule(path: tuple) -> tuple[str, str]:
    """('mayDiffer' | 'equal', why) for a value's key path: the first matching entry, allowances first."""
    c = contract()
    for kind in ("mayDiffer", "equal"):
        for entry in c[kind]:
            if matches(entry["path"], path):
                return kind, " ".join(entry["why"].split())
    return "equal", "only what the contract declares may differ between an environment's clusters"


def leaves(node, path: tuple = ()) -> dict[tuple, object]:
    """Every scalar of a document by its key path (an empty map or list counts as a value of its own)."""
    if isinstance(node, dict) and node:
        out = {}
        for key, value in node.items():
            out.update(leaves(value, path + (key,)))
        return out
    if isinstance(node, list) and node:
        out = {}
        for i, value in enumerate(node):
            out.update(leaves(value, path + (i,)))
        return out
    return {path: node}


_MISSING = object()


def check(env, members: list) -> None:
    """Raise RenderErrors naming every cluster var that makes a value differ that the contract keeps equal."""
    if len(members) < 2:
        return
    values = [leaves(m.layer.data) for m in members]
    first = members[0]
    found: dict[tuple, dict] = {}  # (cluster, var or None) -> {"paths": [...], "why": ..., "location": ...}
    for path in sorted(set().union(*values), key=lambda p: tuple(str(x) for x in p)):
        seen = [v.get(path, _MISSING) for v in values]
        if all(s == seen[0] for s in seen):
            continue
        kind, why = rule(path)
        if kind == "mayDiffer":
            continue
        template = _raw_text(env, path)
        for member, value in zip(members[1:], seen[1:], strict=True):
            if value == seen[0]:
                continue
            own = (env.raw.get("clusters", member.cluster, "vars") or {}) if env.raw is not None else {}
            culprits = [name for name in _VAR.findall(template) if name in own] or [None]
            for name in culprits:
                key = (member.cluster, name)
                item = found.setdefault(key, {"paths": [], "why": why, "location": _where(env, member, name, path)})
                item["paths"].append((path, seen[0], value))
    if not found:
        return
    errors = []
    for (cluster, name), item in found.items():
        path, base, value = item["paths"][0]
        more = len(item["paths"]) - 1
        # located at the var (its location names it), else at the value, naming the cluster
        cause = "" if name and item["location"] and item["location"].path else \
            f"clusters.{cluster}.vars.{name} " if name else f"cluster {cluster!r} "
        also = f" (and {more} more value{'s' if more > 1 else ''})" if more else ""
        where = first.layer.locate(path)
        errors.append(RenderError(
            f"{cause}makes {dotted(path)} differ between the clusters of {env.name!r} ({first.cluster}: "
            f"{_show(base)}; {cluster}: {_show(value)}{f'; written at {where}' if where else ''}){also}, which the "
            f"consistency contract keeps equal: {item['why']}. Set it once, outside `clusters:`, or, if it truly may "
            f"differ, declare its path under mayDiffer in generator/fleet_contract.yaml",
            item["location"]))
    raise RenderErrors(errors)


def _raw_text(env, path: tuple) -> str:
    """The value at `path` as written (templates unresolved), as text: where the vars it reads are named."""
    node = env.raw.get(*path) if env.raw is not None else None
    return node if isinstance(node, str) else yaml.safe_dump(node) if node is not None else ""


def _where(env, member, name: str | None, path: tuple) -> Location | None:
    if name and env.raw is not None:
        loc = env.raw.locate(("clusters", member.cluster, "vars", name))
        if loc:
            return loc
    return member.layer.locate(path)


def _show(value) -> str:
    return "(not set)" if value is _MISSING else repr(value)
