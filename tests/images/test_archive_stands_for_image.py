"""Once the image's OCI archive is written, buildah's storage can be released (CI does, for the disk): `make image`
then finds the image up to date through its archive, and builds again only when an input changed or the archive is
gone; releasing without an archive is refused."""
from __future__ import annotations

import io

import pytest

from images import archive, builders, record
from images.buildah import Buildah
from images.errors import ImageError

REF = "localhost/ray-training:9.9.9-cpu"
IDENT = "ab" * 32


class BuildAttempted(Exception):
    pass


@pytest.fixture
def released(monkeypatch, tmp_path):
    """A cache whose storage holds no image (released), with the record of the last build."""
    monkeypatch.setattr(builders, "choose", lambda builder: "buildah")
    monkeypatch.setattr(builders, "DEFAULT_CACHE", tmp_path)
    monkeypatch.setattr(builders, "docker_available", lambda: False)
    monkeypatch.setattr(Buildah, "inspect", lambda self, image: None)

    def no_build(cache, out):
        raise BuildAttempted
    monkeypatch.setattr(builders.wheelhouse, "ensure", no_build)
    request = builders.Request(REF, cache=tmp_path)
    record.save(tmp_path, REF, IDENT, builders.inputs_hash(request), 7 * 2**30)
    return request


def test_the_archive_stands_for_a_released_image(released, tmp_path):
    record.archive_path(tmp_path, REF, IDENT).write_bytes(b"oci")
    out = io.StringIO()
    built = builders.build(released, out)
    assert not built.rebuilt and built.size_bytes == 7 * 2**30
    assert "storage was released" in out.getvalue()
    assert archive.image_id(REF) == IDENT
    assert archive.write(REF) == record.archive_path(tmp_path, REF, IDENT)


def test_without_its_archive_a_released_image_is_built_again(released):
    with pytest.raises(BuildAttempted):
        builders.build(released, io.StringIO())
    with pytest.raises(ImageError, match="run `make image` first"):
        archive.image_id(REF)


def test_a_changed_input_builds_again_though_an_archive_exists(released, tmp_path):
    record.archive_path(tmp_path, REF, IDENT).write_bytes(b"oci")
    record.save(tmp_path, REF, IDENT, "an-older-source", 1)
    with pytest.raises(BuildAttempted):
        builders.build(released, io.StringIO())


def test_release_is_refused_without_the_archive(released):
    with pytest.raises(ImageError, match="python -m images archive"):
        archive.release(REF)
