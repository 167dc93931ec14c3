"""fetch-schemas with a fake opener / file:// base URL (no real downloads)."""

from __future__ import annotations

import io
import urllib.error

import pytest

from tests.validation.support import FIXTURES, KUBE_VERSION
from validation import FetchError, fetch_schemas, validate_manifests
from validation.fetch_schemas import PINNED_FILES


def test_pins():
    urls = {p.url() for p in PINNED_FILES}
    assert ("https://raw.githubusercontent.com/ray-project/kuberay/v1.7.0/ray-operator/config/crd/bases/"
            "ray.io_rayclusters.yaml") in urls
    assert "https://raw.githubusercontent.com/argoproj/argo-cd/v3.5.1/manifests/crds/application-crd.yaml" in urls
    assert ("https://raw.githubusercontent.com/kubeflow/trainer/v1.9.4/manifests/base/crds/"
            "kubeflow.org_pytorchjobs.yaml") in urls
    assert len(urls) == 8


def _upstream_tree(tmp_path, crds):
    """A fake raw.githubusercontent.com: <base>/<repo>/<tag>/<path>, linking to the offline copies."""
    base = tmp_path / "upstream"
    for pinned in PINNED_FILES:
        target = base / pinned.repo / pinned.tag / pinned.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(crds / pinned.relative_dest)
    return base


def test_fetch_from_file_url_fills_a_usable_cache(tmp_path, crds):
    base = _upstream_tree(tmp_path, crds)
    dest = tmp_path / "cache"
    written = fetch_schemas(dest, base_url=base.as_uri())
    assert sorted(p.relative_to(dest).as_posix() for p in written) == sorted(p.relative_dest for p in PINNED_FILES)
    report = validate_manifests(FIXTURES / "apps" / "good", KUBE_VERSION, dest, backend="in-process")
    assert report.ok


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


def test_partial_failure_writes_nothing(tmp_path, crds):
    base = _upstream_tree(tmp_path, crds)
    (base / PINNED_FILES[-1].repo / PINNED_FILES[-1].tag / PINNED_FILES[-1].path).unlink()
    with pytest.raises(FetchError):
        fetch_schemas(tmp_path / "cache", base_url=base.as_uri())
    assert not (tmp_path / "cache").exists()
