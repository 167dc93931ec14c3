"""make image says, before a cold build, when the disk holding .cache/images has less free space than the build was
measured to need at its peak (the commit of the training stack's layer); with enough, it says nothing."""
from __future__ import annotations

import io
import shutil
from collections import namedtuple

from images import builders

Usage = namedtuple("Usage", "total used free")


def warned(monkeypatch, tmp_path, free_gib) -> str:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, int(free_gib * 2**30)))
    out = io.StringIO()
    builders._warn_if_disk_is_short(tmp_path, out)
    return out.getvalue()


def test_short_disk_is_named_with_what_the_build_needs(monkeypatch, tmp_path):
    text = warned(monkeypatch, tmp_path, 12)
    assert f"12 GiB free on the disk of {tmp_path}" in text and f"about {builders.PEAK_GIB} GiB" in text
    assert "read/write on closed pipe" in text


def test_enough_disk_says_nothing(monkeypatch, tmp_path):
    assert warned(monkeypatch, tmp_path, builders.PEAK_GIB + 1) == ""
