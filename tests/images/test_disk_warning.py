"""make image says, before a cold build, when the disk holding .cache/images has less free space than the build was
measured to need at its peak (the commit of the largest install stage's layer), which depends on where buildah's
temporary files go (memory when it has room, else the disk); with enough, it says nothing."""
from __future__ import annotations

import io
import shutil
from collections import namedtuple
from pathlib import Path

from images import buildah, builders

Usage = namedtuple("Usage", "total used free")
ON_DISK = Path("/var/tmp/ray-gitops-build")  # buildah's temporary files on a disk (this test's own may be in memory)


def warned(monkeypatch, cache: Path, tmp: Path, free_gib) -> str:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, int(free_gib * 2**30)))
    out = io.StringIO()
    builders._warn_if_disk_is_short(cache, tmp, out)
    return out.getvalue()


def test_short_disk_is_named_with_what_the_build_needs(monkeypatch, tmp_path):
    text = warned(monkeypatch, tmp_path, ON_DISK, 12)
    assert f"12 GiB free on the disk of {tmp_path}" in text and f"about {builders.PEAK_GIB['disk']} GiB" in text
    assert "read/write on closed pipe" in text
    text = warned(monkeypatch, tmp_path, Path("/dev/shm/x"), 9)
    assert f"about {builders.PEAK_GIB['memory']} GiB" in text


def test_enough_disk_says_nothing(monkeypatch, tmp_path):
    assert warned(monkeypatch, tmp_path, ON_DISK, builders.PEAK_GIB["disk"] + 1) == ""
    assert warned(monkeypatch, tmp_path, Path("/dev/shm/x"), builders.PEAK_GIB["memory"] + 1) == ""


def test_temporary_files_go_to_memory_only_when_it_has_room(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_GITOPS_BUILDAH_TMPDIR", raising=False)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, 20 * 2**30))
    monkeypatch.setattr(buildah, "memory_available", lambda: 20 * 2**30)
    assert buildah.temporary_dir(tmp_path).parent == buildah.MEMORY_TMP
    monkeypatch.setattr(buildah, "memory_available", lambda: 4 * 2**30)
    assert buildah.temporary_dir(tmp_path) == tmp_path / "tmp"
    monkeypatch.setattr(buildah, "memory_available", lambda: 20 * 2**30)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(0, 0, 64 * 2**20))  # a container's small /dev/shm
    assert buildah.temporary_dir(tmp_path) == tmp_path / "tmp"
    monkeypatch.setenv("RAY_GITOPS_BUILDAH_TMPDIR", str(tmp_path / "mine"))
    assert buildah.temporary_dir(tmp_path) == tmp_path / "mine"
