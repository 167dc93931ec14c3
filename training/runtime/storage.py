"""Paths that may be local directories or storage URIs (s3://, gs://, file://), through pyarrow.fs."""

from __future__ import annotations

import os


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
    fs, p = filesystem(path)
    parent = p.rsplit("/", 1)[0]
    if parent:
        fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(p) as fh:
        fh.write(data)

