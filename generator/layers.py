"""YAML layers with provenance, and the merge that stacks them.

A Layer is plain data (dicts, lists, scalars) plus `origins`: for every key path, the Location
(file, line, path in that file) it was set at. Merging keeps the origin of whichever layer won, so a
fault found after composing still points at the line that caused it.

Merge rules (documented in the README):
  - map + map: merged key by key, recursively;
  - an overlay value of null deletes the key;
  - anything else (lists, scalars, a map over a scalar or the reverse): the overlay replaces the value whole.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import Location, RenderError, dotted

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
_Constructor = yaml.SafeLoader  # builds scalars the way safe_load does


@dataclass
class Layer:
    data: object
    origins: dict = field(default_factory=dict)  # tuple path -> Location

    def locate(self, path) -> Location | None:
        """Where `path` was set: its origin, or its nearest ancestor's extended by the rest of the path."""
        path = tuple(path)
        for n in range(len(path), -1, -1):
            if path[:n] in self.origins:
                loc = self.origins[path[:n]]
                return Location(loc.file, loc.line, loc.path + path[n:])
        return None

    def get(self, *path, default=None):
        """The value at `path` (map keys, and list indices), or `default` where the path leads nowhere."""
        node = self.data
        for part in path:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and -len(node) <= part < len(node):
                node = node[part]
            else:
                return default
        return node

    def sub(self, *path) -> Layer:
        """The layer under `path`, with origins re-keyed relative to it."""
        n = len(path)
        origins = {p[n:]: loc for p, loc in self.origins.items() if p[:n] == tuple(path)}
        return Layer(copy.deepcopy(self.get(*path)), origins)

    def under(self, *prefix) -> Layer:
        """This layer placed under `prefix`."""
        data = self.data
        for part in reversed(prefix):
            data = {part: data}
        return Layer(data, {tuple(prefix) + p: loc for p, loc in self.origins.items()})


def load_yaml(path: Path, display: str) -> Layer:
    """Load one YAML file as a Layer; a syntax error (or a duplicate key) names file:line:column."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RenderError(f"cannot read: {exc.strerror}", Location(display)) from None
    return _cached_load(text, display)


@functools.lru_cache(maxsize=64)
def _cached_load(text: str, display: str) -> Layer:
    layer = _load_text(text, display)
    return Layer(layer.data, layer.origins)


def _load_text(text: str, display: str) -> Layer:
    try:
        node = yaml.compose(text, Loader=_Loader)
        origins: dict = {(): Location(display, 1, ())}
        data = {} if node is None else _build(node, (), display, origins, _Constructor(""))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = str(exc.problem or "")
        if exc.context:
            started = f" (started at line {exc.context_mark.line + 1})" if exc.context_mark else ""
            what = f"{exc.context}{started}: {what}"
        if len(what) > 300:
            what = what[:300] + " ..."
        raise RenderError(f"YAML syntax error: {what}",
                          Location(display, mark.line + 1, column=mark.column + 1) if mark else Location(display)) from None
    if not isinstance(data, dict):
        raise RenderError("expected a mapping at the top of the file", Location(display, 1))
    return Layer(data, origins)


def _build(node, path, display, origins, constructor):
    """YAML nodes (composed by libyaml, with their marks) -> plain Python, recording each key's line."""
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)  # `<<: *anchor` merge keys
        out = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, bool)) and key is not None:
                raise yaml.MarkedYAMLError("while reading a mapping", node.start_mark,
                                           f"unsupported key {key!r}", key_node.start_mark)
            if key in out:
                raise yaml.MarkedYAMLError("while reading a mapping", node.start_mark,
                                           f"duplicate key {key!r}", key_node.start_mark)
            sub = path + (key,)
            origins[sub] = Location(display, key_node.start_mark.line + 1, sub)
            out[key] = _build(value_node, sub, display, origins, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        out = []
        for i, item in enumerate(node.value):
            sub = path + (i,)
            origins[sub] = Location(display, item.start_mark.line + 1, sub)
            out.append(_build(item, sub, display, origins, constructor))
        return out
    return constructor.construct_object(node, deep=True)


def merge(base: Layer, overlay: Layer) -> Layer:
    """Stack `overlay` on `base` (see the module docstring for the rules)."""
    origins = dict(base.origins)
    data = _merge(copy.deepcopy(base.data), overlay.data, (), origins, overlay.origins)
    return Layer(data, origins)


def _merge(base, over, path, origins, over_origins):
    if isinstance(base, dict) and isinstance(over, dict):
        for key, value in over.items():
            sub = path + (key,)
            if value is None:
                base.pop(key, None)
                _drop(origins, sub)
                continue
            if key in base:
                if sub in over_origins:
                    origins[sub] = over_origins[sub]
                base[key] = _merge(base[key], value, sub, origins, over_origins)
            else:
                base[key] = _copy_in(value, sub, origins, over_origins)
        return base
    return _copy_in(over, path, origins, over_origins)


def _copy_in(value, path, origins, over_origins):
    """The overlay replaces the value at `path` whole: take its origins, drop the base's below it."""
    _drop(origins, path, keep_self=True)
    for p, loc in over_origins.items():
        if p[: len(path)] == path:
            origins[p] = loc
    return copy.deepcopy(value)


def _drop(origins, path, keep_self=False):
    n = len(path)
    for p in [p for p in origins if p[:n] == path and (len(p) > n or not keep_self)]:
        del origins[p]


def describe(path) -> str:
    return dotted(path) or "(top level)"
