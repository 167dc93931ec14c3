"""The training stack is built one `buildah bud` per install stage (buildah 1.28 keeps every step's working container
until its bud ends: one bud of the whole stack peaked at about twice the image, and CI machines ran out of disk).
The Dockerfile's stages chain from the base through the deps-* stages to the image, each installing in one step; the
builder runs one bud per deps-* stage in file order, removes each bud's containers before the next (also when a bud
fails), and tags only the last."""
from __future__ import annotations

import io
import re

import pytest

from images import builders
from images.buildah import Buildah
from images.errors import ImageError
from tests.support import REPO

DOCKERFILE = REPO / "training" / "Dockerfile"


def stages(text: str) -> list[tuple[str, str, str]]:
    """(parent, name, body) of each `FROM <parent> AS <name>` stage, and of the last, unnamed one."""
    found = []
    parts = re.split(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", text, flags=re.M | re.I)
    for i in range(1, len(parts), 3):
        found.append((parts[i], parts[i + 1] or "", parts[i + 2]))
    return found


def test_the_install_stages_chain_from_the_base_to_the_image_one_step_each():
    text = DOCKERFILE.read_text()
    deps = builders.deps_stages()
    assert deps == ["deps-cuda", "deps-torch", "deps-tensorflow", "deps-training"]
    chain = [(parent, name) for parent, name, _ in stages(text) if name.startswith("deps-") or not name]
    assert chain[0] == ("base-${VARIANT}", "deps-cuda")
    assert [name for _, name in chain] == [*deps, ""]
    assert all(parent == before for (parent, _), (_, before) in zip(chain[1:], chain[:-1], strict=True))
    for _, name, body in stages(text):
        if name.startswith("deps-"):
            assert len(re.findall(r"^RUN ", body, re.M)) == 1, f"{name}: one install step, one layer"
            for arg in re.findall(r"\$\{?(VARIANT|TORCH_VERSION|TORCH_INDEX_CPU|WHEELHOUSE|RAY_VERSION|PYTHON_TAG)\b", body):
                assert re.search(rf"^ARG {arg}\s*$", body, re.M), f"{name} reads {arg} without declaring it"


class FakeBuildah:
    """Records the buds; each leaves a working container behind, as buildah 1.28 does."""

    def __init__(self, fail_at: str | None = None):
        self.buds: list[list[str]] = []
        self.live: set[str] = {"older"}
        self.removed: list[str] = []
        self.fail_at = fail_at

    def containers(self):
        return set(self.live)

    def remove_containers_since(self, before):
        for c in sorted(self.live - before):
            self.live.discard(c)
            self.removed.append(c)

    def stream(self, *args):
        self.buds.append(list(args))
        assert len(self.live) == 1, "a bud started while an earlier bud's containers were still there"
        self.live.add(f"c{len(self.buds)}")
        if self.fail_at and self.fail_at in args:
            raise ImageError("buildah bud failed (exit 1); its output is above")


@pytest.fixture
def fake(monkeypatch):
    recorder = FakeBuildah()
    for name in ("containers", "remove_containers_since", "stream"):
        monkeypatch.setattr(Buildah, name, lambda self, *a, _n=name: getattr(recorder, _n)(*a))
    return recorder


def test_a_failed_bud_leaves_no_container_and_says_so(fake):
    fake.fail_at = "deps-torch"
    with pytest.raises(ImageError, match="buildah bud failed"):
        for stage in builders.deps_stages():
            builders._bud(Buildah(REPO / ".cache" / "unused"), "--target", stage, ".")
    assert fake.live == {"older"} and len(fake.buds) == 2


def test_the_build_runs_one_bud_per_stage_in_order_and_tags_only_the_last(fake, monkeypatch, tmp_path):
    """builders.build end to end with a fake buildah: the buds it runs, and no container left after any of them."""
    monkeypatch.setattr(Buildah, "inspect", lambda self, image: {"FromImageID": "ab" * 32} if fake.buds else None)
    monkeypatch.setattr(Buildah, "size", lambda self, image: 123)
    monkeypatch.setattr(builders, "choose", lambda builder: "buildah")
    monkeypatch.setattr(builders.wheelhouse, "ensure", lambda cache, out: tmp_path / "wheels")
    monkeypatch.setattr(builders.debian_base, "ensure", lambda buildah, wheels, cache, out: "localhost/base")
    built = builders.build(builders.Request("localhost/ray-training:1-cpu", cache=tmp_path), io.StringIO())
    assert built.rebuilt and built.size_bytes == 123
    targets = [b[b.index("--target") + 1] if "--target" in b else None for b in fake.buds]
    assert targets == [*builders.deps_stages(), None]
    assert ["--tag" in b for b in fake.buds] == [False] * len(builders.deps_stages()) + [True]
    assert "localhost/ray-training:1-cpu" in fake.buds[-1]
    assert all("--volume" in b and "--layers" in b for b in fake.buds)
    assert fake.live == {"older"} and len(fake.removed) == len(fake.buds)
