"""fetch-schemas with a fake opener / file:// base URL (no real downloads). The fake upstream serves the offline
copies: ../shared/crds, and Kueue's CRDs from its Go module (byte-for-byte the repository at the tag)."""

from __future__ import annotations

import hashlib
import io
import urllib.error

import pytest

from tests.validation.support import FIXTURES, KUBE_VERSION, KUEUE, KUEUE_FIXTURES
from validation import FetchError, fetch_schemas, validate_manifests
from validation.fetch_schemas import PINNED_FILES
from validation.report import VALID


def test_pins():
    urls = {p.url() for p in PINNED_FILES}
    assert ("https://raw.githubusercontent.com/ray-project/kuberay/v1.7.0/ray-operator/config/crd/bases/"
            "ray.io_rayclusters.yaml") in urls
    assert "https://raw.githubusercontent.com/argoproj/argo-cd/v3.5.1/manifests/crds/application-crd.yaml" in urls
    assert ("https://raw.githubusercontent.com/kubeflow/trainer/v1.9.4/manifests/base/crds/"
            "kubeflow.org_pytorchjobs.yaml") in urls
    kueue = {p.url() for p in PINNED_FILES if p.repo == "kubernetes-sigs/kueue"}
    assert {f"https://raw.githubusercontent.com/kubernetes-sigs/kueue/{KUEUE.version}/config/components/crd/bases/"
            f"kueue.x-k8s.io_{kinds}.yaml" for kinds in ("resourceflavors", "clusterqueues", "localqueues",
                                                         "admissionchecks", "multikueueclusters",
                                                         "multikueueconfigs", "workloads", "cohorts")} <= kueue
    assert len(urls) == 8 + len(kueue) == len(PINNED_FILES)
    assert all(p.sha256 for p in PINNED_FILES)


def test_the_kueue_checksums_are_those_of_the_pinned_module(kueue_module):
    """`make schemas` checks Kueue's files against the table; validation without it reads the module: the same bytes."""
    pinned = [p for p in PINNED_FILES if p.repo == "kubernetes-sigs/kueue"]
    assert {p.folder for p in pinned} == {f"kueue-{KUEUE.version}"} and {p.tag for p in pinned} == {KUEUE.version}
    for p in pinned:
        assert hashlib.sha256((kueue_module / p.path).read_bytes()).hexdigest() == p.sha256, p.path


def _upstream_tree(tmp_path, crds, kueue_module):
    """A fake raw.githubusercontent.com: <base>/<repo>/<tag>/<path>, linking to the offline copies (Kueue's: its Go
    module, which holds the repository's files at the tag)."""
    base = tmp_path / "upstream"
    for pinned in PINNED_FILES:
        target = base / pinned.repo / pinned.tag / pinned.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if pinned.repo == "kubernetes-sigs/kueue":
            target.symlink_to(kueue_module / pinned.path)
        else:
            target.symlink_to(crds / pinned.relative_dest)
    return base


def test_fetch_from_file_url_fills_a_usable_cache(tmp_path, crds, kueue_module, no_go):
    base = _upstream_tree(tmp_path, crds, kueue_module)
    dest = tmp_path / "cache"
    written = fetch_schemas(dest, base_url=base.as_uri())
    assert sorted(p.relative_to(dest).as_posix() for p in written) == sorted(p.relative_dest for p in PINNED_FILES)
    assert (dest / f"kueue-{KUEUE.version}" / "kueue.x-k8s.io_clusterqueues.yaml").is_file()
    report = validate_manifests(FIXTURES / "apps" / "good", KUBE_VERSION, dest, backend="in-process")
    assert report.ok
    # the cache serves Kueue's kinds by itself: no Go here (no_go), and no note of the module
    report = validate_manifests(KUEUE_FIXTURES / "good", KUBE_VERSION, dest, backend="in-process")
    assert report.ok, report.render()
    assert {r.status for r in report.results} == {VALID} and not report.notes


def test_fake_opener_is_called_with_the_pinned_urls(tmp_path):
    calls = []

    def opener(url, timeout):
        calls.append(url)
        return io.BytesIO(b"not the pinned content")

    with pytest.raises(FetchError, match="does not match the pinned"):
        fetch_schemas(tmp_path / "cache", opener=opener)
    assert calls == [PINNED_FILES[0].url()]
    assert not (tmp_path / "cache").exists()  # nothing written on failure

    calls.clear()
    written = fetch_schemas(tmp_path / "cache", opener=opener, verify=False)
    assert calls == [p.url() for p in PINNED_FILES] and len(written) == len(PINNED_FILES)


def test_no_network_gives_a_clear_message(tmp_path):
    def offline(url, timeout):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    with pytest.raises(FetchError) as caught:
        fetch_schemas(tmp_path / "cache", opener=offline)
    message = str(caught.value)
    assert "could not download https://raw.githubusercontent.com/" in message
    assert "needs network access" in message and "RAY_GITOPS_SCHEMA_LOCATION" in message
    assert not (tmp_path / "cache").exists()


def test_partial_failure_writes_nothing(tmp_path, crds, kueue_module):
    base = _upstream_tree(tmp_path, crds, kueue_module)
    (base / PINNED_FILES[-1].repo / PINNED_FILES[-1].tag / PINNED_FILES[-1].path).unlink()
    with pytest.raises(FetchError):
        fetch_schemas(tmp_path / "cache", base_url=base.as_uri())
    assert not (tmp_path / "cache").exists()
