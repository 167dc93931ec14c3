"""make bump-image TAG=...: set the training image's tag in every environment file, in place.

Edits `cluster.image.tag` wherever an environment file sets it, with ruamel.yaml's round trip, so comments,
key order, quoting and layout stay byte-for-byte as they were outside the edited value. Tags follow
`<version>-<variant>` (0.1.0-cpu, 0.1.0-gpu, 0.1.0-efa): TAG=0.2.0 keeps each file's variant (0.2.0-cpu,
0.2.0-efa); a TAG with a variant (0.2.0-gpu) is written as it is. Job overrides of other images are left alone.
"""
from __future__ import annotations

import io
import re
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from .errors import RenderError

VARIANT = re.compile(r"^(?P<version>.+?)-(?P<variant>cpu|gpu|efa)$")
TAG_OK = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def round_trip_yaml() -> YAML:
    """The ruamel settings every environment file round-trips with byte for byte (comments, quoting, layout)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    # keep `key: null` (it deletes a lower layer's value) instead of ruamel's bare `key:`
    yaml.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def new_tag(old: str, tag: str) -> str:
    if VARIANT.match(tag):
        return tag
    match = VARIANT.match(str(old))
    return f"{tag}-{match.group('variant')}" if match else tag


def bump_file(path: Path, tag: str) -> tuple[str, str] | None:
    """Set the tag in one file; returns (old, new) or None when the file sets no image tag."""
    yaml = round_trip_yaml()
    text = path.read_text()
    doc = yaml.load(text)
    image = ((doc or {}).get("cluster") or {}).get("image") or {}
    if "tag" not in image:
        return None
    old = image["tag"]
    value = new_tag(str(old), tag)
    if isinstance(old, DoubleQuotedScalarString):
        value = DoubleQuotedScalarString(value)
    elif isinstance(old, SingleQuotedScalarString):
        value = SingleQuotedScalarString(value)
    image["tag"] = value
    out = io.StringIO()
    yaml.dump(doc, out)
    path.write_text(out.getvalue())
    return str(old), str(value)


def bump(root: Path, tag: str) -> list[tuple[str, str, str]]:
    if not TAG_OK.match(tag) or tag == "latest":
        raise RenderError(f"TAG {tag!r} is not a pinned image tag (letters, digits, '.', '_', '-'; not 'latest')")
    changed = []
    for path in sorted((root / "environments").glob("*.yaml")):
        result = bump_file(path, tag)
        if result:
            changed.append((f"environments/{path.name}", *result))
    if not changed:
        raise RenderError("no environment file sets cluster.image.tag")
    return changed
