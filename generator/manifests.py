"""helm's multi-document output -> one resource per file, stable key order and formatting."""
from __future__ import annotations

import yaml

from .errors import RenderError

try:  # libyaml when present: the same output, several times faster
    _Loader, _Dumper = yaml.CSafeLoader, yaml.CSafeDumper
except AttributeError:  # pragma: no cover
    _Loader, _Dumper = yaml.SafeLoader, yaml.SafeDumper


class _Dump(_Dumper):
    pass


def _str(dumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dump.add_representer(str, _str)


def split(text: str, what: str) -> list[dict]:
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        raise RenderError(f"{what}: helm produced YAML that does not parse: {exc}") from None
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "name" not in (doc.get("metadata") or {}):
            raise RenderError(f"{what}: helm produced a document without kind and metadata.name: {str(doc)[:200]}")
    return docs


def filename(doc: dict) -> str:
    return f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"


def dump(doc: dict, header: str) -> str:
    body = yaml.dump(doc, Dumper=_Dump, sort_keys=True, default_flow_style=False, allow_unicode=True, width=120)
    return header + body


def load(text: str):
    return yaml.load(text, Loader=_Loader)
