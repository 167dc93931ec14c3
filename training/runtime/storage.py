"""Paths that may be local directories or storage URIs (s3://, gs://, file://), through pyarrow.fs: the package's one
writer (:func:`write_bytes`), and what makes a value fit to be written as JSON (:func:`json_safe`)."""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any


def is_uri(path: str) -> bool:
    return "://" in path


def filesystem(path: str):
    """(pyarrow filesystem, path inside it) for a local path or a URI."""
    import pyarrow.fs as pafs

    if is_uri(path):
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), os.path.abspath(path)


def join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for part in parts:
        out += "/" + part.strip("/")
    return out


def exists(path: str) -> bool:
    import pyarrow.fs as pafs

    fs, p = filesystem(path)
    return fs.get_file_info(p).type != pafs.FileType.NotFound


def is_dir(path: str) -> bool:
    import pyarrow.fs as pafs

    fs, p = filesystem(path)
    return fs.get_file_info(p).type == pafs.FileType.Directory


def read_bytes(path: str) -> bytes:
    fs, p = filesystem(path)
    with fs.open_input_stream(p) as fh:
        return fh.read()


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to a local path (whole or not at all: a temporary file beside it, then renamed over it) or to
    a storage URI (an object store writes an object whole), making the folders it needs."""
    if not is_uri(path):
        path = os.path.abspath(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return
    fs, p = filesystem(path)
    parent = p.rsplit("/", 1)[0]
    if parent:
        fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(p) as fh:
        fh.write(data)


def sha256(path: str, chunk: int = 1 << 20) -> str:
    """The SHA-256 of a file, local or at a URI, read in chunks."""
    fs, p = filesystem(path)
    digest = hashlib.sha256()
    with fs.open_input_stream(p) as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def json_safe(value: Any) -> Any:
    """``value`` as JSON can hold it: NaN/inf become strings, numpy scalars Python numbers, unknown objects their
    str(); mappings and sequences throughout."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if isinstance(value, float) or type(value).__module__ == "numpy":
        if not math.isfinite(f):
            return str(f)
        return int(f) if type(value).__name__.startswith(("int", "uint")) else f
    return str(value)

