"""A real Kubernetes node on this machine: containerd + runc (Debian's), the CNI bridge (Debian's plugins), the
kubelet and kube-proxy (k8s.io/kubernetes, built by e2e.components), CoreDNS as the cluster's DNS and kube-router's
firewall as its NetworkPolicy enforcer. Pods on it are real containers: images are pulled from nowhere (no registry
exists here), so the images a node needs are imported into containerd under the names the manifests use, as
`minikube image load` does (e2e.node_images).

What this machine forces, each found by a failure (docs/e2e.md, "The real node"):
- root has no CAP_SYS_RESOURCE: containerd clamps oom_score_adj (restrict_oom_score_adj), the kubelet keeps 0;
- free disk swings while builds run: absolute eviction thresholds and no image garbage collection (an imported
  image that is collected cannot be pulled back);
- a node address must not be loopback: a veth pair carries the node IP, the API server listens and advertises on
  it (the `kubernetes` Service's endpoint), its certificate names it and the Service IP;
- the node's ports are chosen free, so nothing clashes with the kwok clusters on the same loopback.
Everything it changes on the host (links, sysctls, iptables chains, mounts, cgroups) is undone by stop().
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import kube
from .procs import Supervisor, free_port, wait_until

SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
CNI_BIN = "/usr/lib/cni"
CLUSTER_DOMAIN = "cluster.local"
# host paths the kubelet, libcni and the runc shim write whatever their flags say (the note's "paths written
# outside the chosen dirs"): removed at stop when this run made them
FIXED_PATHS = ("/var/lib/cni/results", "/var/log/containers", "/var/log/pods", "/run/containerd")


def sysctl(name: str, value: str | None = None) -> str:
    path = Path("/proc/sys") / name.replace(".", "/")
    if value is not None:
        path.write_text(value)
    return path.read_text().strip()


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


@dataclass
class RealNode:
    """One real node of a cluster. `index` keeps its addresses apart from other clusters' (10.250.<index>.1)."""
    name: str
    index: int
    directory: Path
    service_cidr: str             # the cluster's --service-cluster-ip-range
    labels: dict = field(default_factory=dict)
    kubelet_port: int = field(default_factory=free_port)
    saved_sysctls: dict = field(default_factory=dict)

    def record(self) -> dict:
        return {"name": self.name, "index": self.index, "directory": str(self.directory),
                "service_cidr": self.service_cidr, "saved_sysctls": self.saved_sysctls}

    @classmethod
    def from_record(cls, record: dict) -> RealNode:
        return cls(record["name"], record["index"], Path(record["directory"]), record["service_cidr"],
                   saved_sysctls=record.get("saved_sysctls") or {})

    # --- addresses ----------------------------------------------------------------------------------------------
    @property
    def ip(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def pod_cidr(self) -> str:
        return f"10.{244 - self.index}.0.0/24"

    @property
    def dns_ip(self) -> str:
        return self.service_cidr.rsplit(".", 2)[0] + ".0.10"

    @property
    def api_service_ip(self) -> str:
        return self.service_cidr.rsplit(".", 2)[0] + ".0.1"

    @property
    def link(self) -> str:
        return f"e2e-node{self.index}"

    @property
    def bridge(self) -> str:
        return f"e2e-cni{self.index}"

    @property
    def socket_dir(self) -> Path:
        """Unix sockets need short paths (108 bytes): a directory under /run named by this node's directory."""
        import hashlib
        return Path("/run") / f"ray-gitops-e2e-{hashlib.sha256(str(self.directory).encode()).hexdigest()[:10]}"

    @property
    def containerd_socket(self) -> Path:
        return self.socket_dir / "containerd.sock"

    # --- host ---------------------------------------------------------------------------------------------------
    def prepare_host(self) -> None:
        """The node's address on a veth pair, forwarding, and bridged traffic through iptables (kube-proxy's and
        the NetworkPolicy enforcer's rules see pod-to-pod packets on the bridge)."""
        if os.geteuid() != 0:
            raise RuntimeError("a real node needs root (containerd, the kubelet, iptables)")
        run("ip", "link", "del", self.link, check=False)
        run("ip", "link", "add", self.link, "type", "veth", "peer", "name", f"{self.link}p")
        run("ip", "addr", "add", f"{self.ip}/32", "dev", self.link)
        run("ip", "link", "set", self.link, "up")
        run("ip", "link", "set", f"{self.link}p", "up")
        for name, value in (("net.ipv4.ip_forward", "1"), ("net.bridge.bridge-nf-call-iptables", "1"),
                            ("net.ipv4.conf.all.route_localnet", "1")):
            try:
                self.saved_sysctls.setdefault(name, sysctl(name))
                sysctl(name, value)
            except OSError as exc:
                raise RuntimeError(f"cannot set {name}={value}: {exc}") from None
        self.socket_dir.mkdir(parents=True, exist_ok=True)

    # --- containerd ---------------------------------------------------------------------------------------------
    def containerd_config(self) -> Path:
        d = self.directory
        cni_conf = d / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-e2e.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": f"e2e-{self.index}",
            "plugins": [
                {"type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_cidr}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(d / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}, indent=2))
        config = d / "containerd.toml"
        config.write_text(f"""version = 2
root = "{d / 'containerd' / 'root'}"
state = "{self.socket_dir / 'state'}"
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.socket_dir / 'containerd.sock.ttrpc'}"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'containerd' / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
""")
        return config

    def start_containerd(self, sup: Supervisor) -> None:
        sup.start(f"node-{self.name}-containerd", ["containerd", "--config", self.containerd_config()])
        wait_until(lambda: self.containerd_socket.exists() and self.ctr("version").returncode == 0, 60, 0.5,
                   "containerd")

    def ctr(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True)

    def import_image(self, archive: Path) -> None:
        proc = self.ctr("images", "import", "--all-platforms", str(archive))
        if proc.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed: {proc.stderr.strip()}")

    def discard_unpacked_layers(self, archive: Path) -> int:
        """Delete from containerd's content store the layers of an imported archive, now that they are unpacked into
        snapshots (what the CRI does for the images it pulls with `discard_unpacked_layers`; containerd 1.6's `ctr
        images import` has no such flag). The training image's layers would otherwise sit on the disk twice, as
        compressed blobs beside the unpacked files. The image's manifest and config stay; its containers run from the
        snapshots. Returns how many blobs were removed."""
        from .oci import layer_digests
        digests = layer_digests(archive)
        if not digests:
            return 0
        proc = self.ctr("content", "rm", *digests)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr content rm (the unpacked layers of {archive.name}) failed: {proc.stderr.strip()}")
        return len(digests)

    def tag_image(self, source: str, target: str) -> None:
        """Name an imported image under another reference (a rebuilt image loaded under a new tag)."""
        tag_image(self.containerd_socket, source, target)

    def images(self) -> set[str]:
        proc = self.ctr("images", "list", "--quiet")
        return set(proc.stdout.split()) if proc.returncode == 0 else set()

    # --- kubelet and kube-proxy ---------------------------------------------------------------------------------
    def start_kubelet(self, sup: Supervisor, bins: dict, ca, kubeconfig: Path) -> None:
        d = self.directory
        certs = d / "pki"
        serving = ca.issue(f"kubelet-{self.name}", self.name, server=True, hosts=(self.ip, self.name))
        config = d / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": self.ip, "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            "tlsCertFile": str(serving.cert), "tlsPrivateKeyFile": str(serving.key),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(ca.pair.cert)}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs", "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "clusterDNS": [self.dns_ip], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": "/etc/resolv.conf",
            "failSwapOn": False, "oomScoreAdj": 0, "serializeImagePulls": False,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "512Mi",
                             "imagefs.available": "512Mi", "nodefs.inodesFree": "1%", "imagefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "podLogsDir": str(d / "pod-logs"), "maxPods": 110, "rotateCertificates": False,
            "registerNode": True, "enforceNodeAllocatable": ["pods"],
            "cgroupRoot": "/", "cgroupsPerQOS": True,
            "shutdownGracePeriod": "0s", "nodeStatusReportFrequency": "10s",
        }))
        (d / "pod-logs").mkdir(parents=True, exist_ok=True)
        sup.start(f"node-{self.name}-kubelet", [
            bins["kubelet"], f"--config={config}", f"--kubeconfig={kubeconfig}", f"--root-dir={d / 'kubelet'}",
            f"--cert-dir={certs}", f"--hostname-override={self.name}", f"--node-ip={self.ip}", "--v=1"])

    def start_kube_proxy(self, sup: Supervisor, bins: dict, kubeconfig: Path) -> None:
        config = self.directory / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)}, "hostnameOverride": self.name,
            "bindAddress": self.ip, "clusterCIDR": self.pod_cidr, "mode": "iptables",
            "metricsBindAddress": f"127.0.0.1:{free_port()}", "healthzBindAddress": f"127.0.0.1:{free_port()}",
            # leave the host's conntrack sysctls as they are
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }))
        sup.start(f"node-{self.name}-kube-proxy", [bins["kube-proxy"], f"--config={config}", "--v=1"])

    def start_network_policy(self, sup: Supervisor, bins: dict, kubeconfig: Path) -> None:
        """kube-router's firewall only: it is neither the CNI nor the service proxy here."""
        sup.start(f"node-{self.name}-kube-router", [
            bins["kube-router"], f"--kubeconfig={kubeconfig}", f"--hostname-override={self.name}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
            "--metrics-port=0", f"--health-port={free_port()}", "--iptables-sync-period=30s", "--v=1"])

    def wait_ready(self, kubeconfig: Path, context: str, timeout: float = 180) -> None:
        from kubernetes import client
        core = client.CoreV1Api(kube.api_client(kubeconfig, context))

        def ready():
            node = core.read_node(self.name)
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        wait_until(ready, timeout, 1, f"node {self.name} to be Ready")
        # labels in the kubernetes.io / k8s.io namespaces are not the kubelet's to set (--node-labels refuses
        # them): an admin labels the node, as `minikube start` does
        if self.labels:
            core.patch_node(self.name, {"metadata": {"labels": self.labels}})

    # --- teardown -----------------------------------------------------------------------------------------------
    def stop(self, bins: dict, log) -> None:
        """After the supervisor stopped the processes: containers, mounts, rules, links, sysctls."""
        if self.containerd_socket.exists():  # a containerd still up kills its tasks itself first
            for task in self.ctr("tasks", "list", "--quiet").stdout.split():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task)
            time.sleep(0.5)
        _kill_shims(self.socket_dir, log)
        if "kube-proxy" in bins:
            run(bins["kube-proxy"], "--cleanup", check=False)
        if "kube-router" in bins:
            run(bins["kube-router"], "--cleanup-config", check=False)
        for root in (self.directory / "kubelet", self.directory / "containerd", self.socket_dir):
            _unmount_below(root, log)
        for link in (self.link, self.bridge):
            run("ip", "link", "del", link, check=False)
        for name, value in self.saved_sysctls.items():
            try:
                sysctl(name, value)
            except OSError:
                pass
        _remove_kubelet_chains()
        _remove_policy_chains()
        _remove_masquerade_chains(f"e2e-{self.index}")
        _remove_pod_netns(log)
        for cgroup_root in Path("/sys/fs/cgroup").glob("*/kubepods"):
            _remove_cgroup_tree(cgroup_root)
        subprocess.run(["rm", "-rf", str(self.socket_dir)], capture_output=True)


def tag_image(socket: Path, source: str, target: str) -> None:
    proc = subprocess.run(["ctr", "--address", str(socket), "-n", "k8s.io", "images", "tag", "--force", source,
                           target], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ctr images tag {source} {target} failed: {proc.stderr.strip()}")


def _kill_shims(socket_dir: Path, log) -> None:
    """containerd-shim-runc-v2 processes outlive containerd: end the ones of this node, their containers first."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and str(socket_dir).encode() in b" ".join(cmdline):
            shim = int(proc.name)
            for pid in [*_descendants(shim), shim]:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            log(f"node: killed shim {shim} and its containers")


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            stack += children
    return found


def _unmount_below(root: Path, log) -> None:
    try:
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        return
    prefix = str(root)
    for mount in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), key=len, reverse=True):
        if subprocess.run(["umount", "-l", mount], capture_output=True).returncode != 0:
            log(f"node: could not unmount {mount}")


def _remove_kubelet_chains() -> None:
    for table, chains in (("filter", ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY")),
                          ("nat", ("KUBE-KUBELET-CANARY",)), ("mangle", ("KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"))):
        for chain in chains:
            for parent in ("INPUT", "OUTPUT"):
                while subprocess.run(["iptables", "-t", table, "-D", parent, "-j", chain],
                                     capture_output=True).returncode == 0:
                    pass
            subprocess.run(["iptables", "-t", table, "-F", chain], capture_output=True)
            subprocess.run(["iptables", "-t", table, "-X", chain], capture_output=True)


def _remove_policy_chains() -> None:
    """kube-router's firewall chains, should its --cleanup-config have left any (it does when its pods are gone)."""
    dump = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True).stdout
    ours = [line[1:].split()[0] for line in dump.splitlines()
            if line.startswith(":") and line[1:].startswith(("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-"))]
    for line in dump.splitlines():  # the jumps into them from the built-in chains
        if line.startswith("-A ") and any(f"-j {chain}" in line for chain in ours):
            subprocess.run(["iptables", "-t", "filter", "-D", *shlex.split(line[3:])], capture_output=True)
    for chain in ours:
        subprocess.run(["iptables", "-t", "filter", "-F", chain], capture_output=True)
    for chain in ours:
        subprocess.run(["iptables", "-t", "filter", "-X", chain], capture_output=True)
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout.split()
    for name in sets:  # its ipsets, free once no rule uses them
        if name.startswith(("KUBE-DST-", "KUBE-SRC-", "kube-router-")):
            subprocess.run(["ipset", "destroy", name], capture_output=True)


def masquerade_rules(nat_dump: str, network: str) -> tuple[list[list[str]], list[str]]:
    """In `iptables-save -t nat`: the jumps the CNI bridge plugin's ipMasq added to POSTROUTING for the pods of this
    node's network (each rule's comment names the network and the container), and the CNI-<hash> chains they jump
    to."""
    marker = f'name: "{network}" id: '
    jumps, chains = [], []
    for line in nat_dump.splitlines():
        if not line.startswith("-A POSTROUTING "):
            continue
        args = shlex.split(line[3:])
        comment = args[args.index("--comment") + 1] if "--comment" in args else ""
        target = args[args.index("-j") + 1] if "-j" in args else ""
        if comment.startswith(marker) and target.startswith("CNI-"):
            jumps.append(args)
            chains.append(target)
    return jumps, chains


def _remove_masquerade_chains(network: str) -> None:
    """The bridge plugin's masquerade chains of the pods: it removes them on CNI DEL, which never ran (the shims were
    killed), so every pod the node ran left a nat chain and its POSTROUTING jump."""
    dump = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
    jumps, chains = masquerade_rules(dump, network)
    for args in jumps:
        subprocess.run(["iptables", "-t", "nat", "-D", *args], capture_output=True)
    for chain in chains:
        subprocess.run(["iptables", "-t", "nat", "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True)


def _remove_pod_netns(log) -> None:
    """The pods' network namespaces (containerd's CRI names them cni-<uuid>): the shims were killed, so no CNI DEL
    ran; deleting a namespace removes its veth pair too. This node is the only CRI user on the machine."""
    for netns in Path("/run/netns").glob("cni-*"):
        if subprocess.run(["ip", "netns", "del", netns.name], capture_output=True).returncode != 0:
            log(f"node: could not delete network namespace {netns.name}")


def _remove_cgroup_tree(path: Path) -> None:
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            child.rmdir()
        except OSError:
            pass
    try:
        path.rmdir()
    except OSError:
        pass
