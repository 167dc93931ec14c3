"""The real node's pieces that need no root: its addresses, the OCI archives of its own images, image names as
containerd stores them, and which environments have a real node (e2e/nodes.yaml)."""
from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from e2e import node_images, nodes, oci
from e2e.real_node import RealNode, masquerade_rules


def test_addresses_keep_clusters_apart():
    a = RealNode("minikube", 0, Path("/x/a"), "10.96.0.0/16")
    b = RealNode("other", 1, Path("/x/b"), "10.97.0.0/16")
    assert (a.ip, a.pod_cidr, a.dns_ip, a.api_service_ip) == ("10.250.0.1", "10.244.0.0/24", "10.96.0.10", "10.96.0.1")
    assert (b.ip, b.pod_cidr, b.dns_ip) == ("10.250.1.1", "10.243.0.0/24", "10.97.0.10")
    assert a.socket_dir != b.socket_dir and len(str(a.containerd_socket)) < 100


def test_a_node_record_round_trips():
    node = RealNode("minikube", 0, Path("/x/a"), "10.96.0.0/16", saved_sysctls={"net.ipv4.ip_forward": "0"})
    again = RealNode.from_record(json.loads(json.dumps(node.record())))
    assert (again.name, again.ip, again.saved_sysctls) == (node.name, node.ip, node.saved_sysctls)


def test_oci_archive_is_deterministic_and_named_for_containerd(tmp_path):
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF fake")
    image = oci.Image("quay.io/kuberay/operator:v1.7.0", (oci.File("/manager", binary),), entrypoint=("/manager",))
    first = oci.write(image, tmp_path / "a.tar").read_bytes()
    second = oci.write(image, tmp_path / "b.tar").read_bytes()
    assert first == second
    with tarfile.open(tmp_path / "a.tar") as tar:
        index = json.loads(tar.extractfile("index.json").read())
        names = tar.getnames()
    annotations = index["manifests"][0]["annotations"]
    assert annotations["io.containerd.image.name"] == "quay.io/kuberay/operator:v1.7.0"
    assert annotations["org.opencontainers.image.ref.name"] == "v1.7.0"
    assert "oci-layout" in names and sum(n.startswith("blobs/sha256/") for n in names) == 3


def test_image_names_as_containerd_stores_them():
    n = node_images._normalized
    assert n("busybox") == "docker.io/library/busybox:latest"
    assert n("rayproject/ray:2.60.0") == "docker.io/rayproject/ray:2.60.0"
    assert n("localhost/ray-training:0.1.0-cpu") == "localhost/ray-training:0.1.0-cpu"
    assert n("quay.io/kuberay/operator:v1.7.0") == "quay.io/kuberay/operator:v1.7.0"


def test_served_images_are_the_operators_and_the_store_and_nothing_else(tmp_path, monkeypatch):
    # which images are served does not depend on the machine's busybox (`make setup-e2e` installs it): a stand-in
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"busybox")
    monkeypatch.setattr(node_images, "busybox_binary", lambda: busybox)
    bins = {}
    for name in ("kuberay-operator", "kuberay-operator-launcher", "training-operator", "versitygw"):
        bins[name] = str(tmp_path / name)
        Path(bins[name]).write_bytes(b"bin")
    assert node_images.served_archive("quay.io/kuberay/operator:v1.7.0", bins, tmp_path)
    assert node_images.served_archive("ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489", bins, tmp_path)
    assert node_images.served_archive("ghcr.io/versity/versitygw:v1.8.0", bins, tmp_path)
    # an image nobody built is not made up: the kubelet reports it cannot pull it
    assert node_images.served_archive("localhost/ray-training:0.0.0-not-built", bins, tmp_path) is None
    with tarfile.open(node_images.served_archive("quay.io/kuberay/operator:v1.7.0", bins, tmp_path)) as tar:
        blobs = [m for m in tar.getmembers() if m.name.startswith("blobs/")]
        layer = max(blobs, key=lambda m: m.size)
        with tarfile.open(fileobj=tar.extractfile(layer)) as inner:
            assert {"manager", "kuberay-operator"} <= set(inner.getnames())


def test_without_busybox_the_store_image_says_what_installs_it(monkeypatch):
    monkeypatch.setattr(node_images.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"make setup-e2e.*busybox-static"):
        node_images.busybox_binary()


# `iptables-save -t nat` after an e2e run whose pods never got a CNI DEL (2026-11-29, shortened): the bridge
# plugin's masquerade jumps and chains for network e2e-0, beside a rule of another network and one of the host's.
NAT_AFTER_A_RUN = r"""*nat
:POSTROUTING ACCEPT [0:0]
:CNI-11d01a5a811b67ab0994cad5 - [0:0]
:CNI-37fd308980264a1aef5e5df0 - [0:0]
:CNI-aaaa - [0:0]
-A POSTROUTING -s 10.244.0.7/32 -m comment --comment "name: \"e2e-0\" id: \"2ec189c9\"" -j CNI-11d01a5a811b67ab0994cad5
-A POSTROUTING -s 10.244.0.8/32 -m comment --comment "name: \"e2e-0\" id: \"40175ac4\"" -j CNI-37fd308980264a1aef5e5df0
-A POSTROUTING -s 10.88.0.2/32 -m comment --comment "name: \"podman\" id: \"77\"" -j CNI-aaaa
-A POSTROUTING -o eth0 -j MASQUERADE
-A CNI-11d01a5a811b67ab0994cad5 -d 10.244.0.0/24 -m comment --comment "name: \"e2e-0\" id: \"2ec189c9\"" -j ACCEPT
COMMIT
"""


def test_teardown_finds_the_masquerade_chains_of_its_own_network_only():
    """The node's teardown removes what the CNI bridge plugin's ipMasq left (its pods never got a CNI DEL): the
    POSTROUTING jumps commented with this node's network, and their chains; another network's stay."""
    jumps, chains = masquerade_rules(NAT_AFTER_A_RUN, "e2e-0")
    assert chains == ["CNI-11d01a5a811b67ab0994cad5", "CNI-37fd308980264a1aef5e5df0"]
    assert jumps[0] == ["POSTROUTING", "-s", "10.244.0.7/32", "-m", "comment", "--comment",
                        'name: "e2e-0" id: "2ec189c9"', "-j", "CNI-11d01a5a811b67ab0994cad5"]
    assert masquerade_rules(NAT_AFTER_A_RUN, "e2e-1") == ([], [])


def test_nodes_file_names_minikube_real_and_eks_kwok():
    assert nodes.real("minikube")["name"] == "minikube"
    assert nodes.real("eks") is None
    assert nodes.manifests("minikube") == []
    assert nodes.manifests("eks")


def test_nothing_the_repo_server_mounts_can_hide_a_clone_under_tmp():
    """A fresh clone in a temporary folder (/tmp/...) must run the e2e: the repo-server's private mount namespace
    once bound a directory over /tmp, and its own binary under <clone>/.cache/e2e/bin was "not found"."""
    from e2e.argo import REPO_SERVER_MOUNTS
    for clone in ("/tmp/ray-gitops", "/var/tmp/x/ray-gitops", "/home/u/src/ray-gitops"):
        hidden = [m for m in REPO_SERVER_MOUNTS if clone == m or clone.startswith(m.rstrip("/") + "/")]
        assert not hidden, (clone, hidden)


def _nested_archive(tmp_path: Path) -> tuple[Path, list[str]]:
    """An OCI archive whose index points at an image index of two manifests sharing a layer (as a multi-platform
    push writes it)."""
    def add(tar, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        info = tarfile.TarInfo(f"blobs/sha256/{digest}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        return f"sha256:{digest}"

    path = tmp_path / "nested.oci.tar"
    with tarfile.open(path, "w") as tar:
        shared, own = add(tar, b"layer shared"), add(tar, b"layer own")
        manifests = [add(tar, json.dumps({"layers": [{"digest": d} for d in layers]}).encode())
                     for layers in ((shared,), (shared, own))]
        index = add(tar, json.dumps({"manifests": [{"digest": m} for m in manifests]}).encode())
        data = json.dumps({"manifests": [{"digest": index}]}).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path, [shared, own]


def test_layer_digests_follow_nested_indexes_once_each(tmp_path):
    path, expected = _nested_archive(tmp_path)
    assert oci.layer_digests(path) == expected
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF fake")
    single = oci.write(oci.Image("example/tool:1", (oci.File("/tool", binary),)), tmp_path / "single.tar")
    assert len(oci.layer_digests(single)) == 1


def test_the_node_drops_an_imported_archives_layers_and_says_when_it_cannot(tmp_path, monkeypatch):
    path, expected = _nested_archive(tmp_path)
    node = RealNode("minikube", 0, tmp_path, "10.96.0.0/16")
    calls = []

    def ctr(*args):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0 if len(calls) == 1 else 1, "", "content digest not found")

    monkeypatch.setattr(node, "ctr", ctr)
    assert node.discard_unpacked_layers(path) == 2
    assert calls == [("content", "rm", *expected)]
    with pytest.raises(RuntimeError, match="ctr content rm .*nested.oci.tar.* failed: content digest not found"):
        node.discard_unpacked_layers(path)
