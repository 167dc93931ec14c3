"""make bump-image TAG=... [ENV=... DIGEST=sha256:...]: set the training image's tag in every environment file, in place.

Edits `cluster.image.tag` wherever an environment file sets it, with ruamel.yaml's round trip, so comments,
key order, quoting and layout stay byte-for-byte as they were outside the edited value. Tags follow
`<version>-<variant>` (0.1.0-cpu, 0.1.0-gpu, 0.1.0-efa): TAG=0.2.0 keeps each file's variant (0.2.0-cpu,
0.2.0-efa); a TAG with a variant (0.2.0-gpu) is written as it is. Job overrides of other images are left alone.
A digest belongs to one image (one variant), so DIGEST= needs ENV= and is written, with the tag, into that
environment's file (`cluster.image.digest`: the image is then <repository>:<tag>@<digest>); a new TAG without a
DIGEST removes the digests of the files it changes (a stale digest would keep the old image).
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
DIGEST_OK = re.compile(r"^sha256:[0-9a-f]{64}$")


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


def bump_file(path: Path, tag: str, digest: str | None = None) -> tuple[str, str] | None:
    """Set the tag (and the digest, or remove a digest) in one file; returns (old, new) image references, or None
    when the file sets no image tag."""
    yaml = round_trip_yaml()
    text = path.read_text()
    doc = yaml.load(text)
    image = ((doc or {}).get("cluster") or {}).get("image") or {}
    if "tag" not in image:
        return None
    old = image["tag"]
    old_ref = f"{old}@{image['digest']}" if image.get("digest") else str(old)
    value = new_tag(str(old), tag)
    if isinstance(old, DoubleQuotedScalarString):
        value = DoubleQuotedScalarString(value)
    elif isinstance(old, SingleQuotedScalarString):
        value = SingleQuotedScalarString(value)
    image["tag"] = value
    if digest:
        if "digest" in image:
            image["digest"] = digest
        else:
            image.insert(list(image).index("tag") + 1, "digest", digest)
    else:
        image.pop("digest", None)
    out = io.StringIO()
    yaml.dump(doc, out)
    path.write_text(out.getvalue())
    return old_ref, f"{value}@{digest}" if digest else str(value)


def bump(root: Path, tag: str, digest: str | None = None, env: str | None = None) -> list[tuple[str, str, str]]:
    if not TAG_OK.match(tag) or tag == "latest":
        raise RenderError(f"TAG {tag!r} is not a pinned image tag (letters, digits, '.', '_', '-'; not 'latest')")
    if digest is not None and not DIGEST_OK.match(digest):
        raise RenderError(f"DIGEST {digest!r} is not an image digest (expected sha256: and 64 hex digits)")
    if digest and not env:
        raise RenderError("DIGEST= names one image (one variant): give the environment too, ENV=<name>")
    paths = sorted((root / "environments").glob("*.yaml"))
    if env:
        from . import environments
        known = environments.names(root)
        if env not in known:
            raise RenderError(f"unknown environment {env!r}; known environments: {', '.join(known)}")
        paths = [root / "environments" / f"{env}.yaml"]
    changed = []
    for path in paths:
        result = bump_file(path, tag, digest)
        if result:
            changed.append((f"environments/{path.name}", *result))
    if not changed:
        raise RenderError(f"{'environments/' + env + '.yaml sets' if env else 'no environment file sets'} "
                          f"{'no ' if env else ''}cluster.image.tag" + (": set the tag there first" if env else ""))
    return changed
