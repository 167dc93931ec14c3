"""A kubelet for the operator pods: the KubeRay operator and the training-operator run as real processes for the
pods of the Deployments Argo CD installed, and only while such a pod exists and is Ready.

kwok plays the kubelet for every pod (it reports them Running and Ready, nothing runs). For a pod whose container
image is one of the operators, this module also runs that container's process the way a kubelet would:

- the command line is the container's `command` + `args` as Argo CD applied them (e.g. the KubeRay chart's
  feature gates), with listen addresses moved to free loopback ports;
- env from the container spec (values, the downward API, ConfigMap and Secret keys);
- in a private mount namespace: the service-account token (a TokenRequest for the pod's service account, so the
  operator has exactly the RBAC its manifests grant), `ca.crt` and `namespace` at
  /var/run/secrets/kubernetes.io/serviceaccount, and the pod's secret / configMap / downwardAPI / emptyDir volumes
  at their mount paths (secrets re-projected every few seconds, as the kubelet syncs them: the training-operator's
  certificate rotator depends on it); KUBERNETES_SERVICE_HOST/PORT point at the API server;
- a container port another component dials (the training-operator's webhook on 9443) is routed through the API
  server's egress proxy (e2e.egress) from the Service that targets it, and the process reaches Services by DNS
  name through the same proxy (HTTP_PROXY): the pod network, for what the operators call (Ray's job API).

When the pod goes away the process is stopped; when the process exits it is restarted with a backoff.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .egress import ServiceRoutes
from .procs import Supervisor, free_port, in_mount_namespace

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class OperatorImage:
    binary: str
    pattern: re.Pattern
    listen_flags: dict       # name -> flag template with {port}
    container_ports: dict    # container port (number) -> name of the listen flag (or config port) that serves it
    # listen addresses in a config file the operator reads (a configMap volume mounted with subPath, named by a
    # `--flag=<mount path>` argument): name -> (pattern of the line, replacement with {port})
    config_ports: dict = field(default_factory=dict)


OPERATORS = [
    OperatorImage("kuberay-operator", re.compile(r"(^|/)kuberay/operator:"),
                  {"metrics": "--metrics-addr=127.0.0.1:{port}",
                   "probe": "--health-probe-bind-address=127.0.0.1:{port}"}, {}),
    OperatorImage("training-operator", re.compile(r"(^|/)training-operator(:|@)"),
                  {"metrics": "--metrics-bind-address=127.0.0.1:{port}",
                   "probe": "--health-probe-bind-address=127.0.0.1:{port}",
                   "webhook": "--webhook-server-port={port}"}, {9443: "webhook"}),
    # Kueue reads its listen addresses from its configuration file (the ConfigMap kueue-manager-config, mounted
    # with subPath at /controller_manager_config.yaml); the API server dials its webhooks (9443) and its
    # visibility API (8082, an aggregated APIService).
    OperatorImage("kueue", re.compile(r"(^|/)kueue/kueue:"),
                  {"visibility": "--visibility-server-port={port}"}, {9443: "webhook", 8082: "visibility"},
                  config_ports={"webhook": (r"(?m)^(\s+port:\s*)9443[ \t]*$", r"\g<1>{port}"),
                                "probe": (r"(?m)^(\s+healthProbeBindAddress:\s*)\S+[ \t]*$", r"\g<1>127.0.0.1:{port}"),
                                "metrics": (r"(?m)^(\s+bindAddress:\s*)\S+[ \t]*$", r"\g<1>127.0.0.1:{port}")}),
]
UNKNOWN_GATE = re.compile(r"unrecognized feature gate: (\w+)")


def operator_for(image: str) -> OperatorImage | None:
    return next((op for op in OPERATORS if op.pattern.search(image)), None)


def _ready(pod) -> bool:
    if pod.metadata.deletion_timestamp or (pod.status.phase or "") != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    if not path.exists() or path.read_bytes() != data:
        tmp.replace(path)
    else:
        tmp.unlink()


class OperatorPods:
    """Runs the operator processes of one cluster."""

    def __init__(self, env: str, api_client, server_port: int, ca_file: Path, directory: Path, sup: Supervisor,
                 bins: dict, routes: ServiceRoutes, log: Callable[[str], None], egress_port: int):
        from kubernetes import client
        self.env, self.core = env, client.CoreV1Api(api_client)
        self.server_port, self.ca_file, self.directory = server_port, ca_file, directory
        self.sup, self.bins, self.routes, self.log = sup, bins, routes, log
        self.egress_port = egress_port
        self.running: dict[str, dict] = {}   # process name -> {pod uid, volumes, routes}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"operator-pods-{env}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        for name in list(self.running):
            self._stop(name)

    def _loop(self) -> None:
        while not self.stop_event.wait(2):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - an API hiccup must not end the loop; next round retries
                self.log(f"operator pods {self.env}: {exc}")

    def sync(self) -> None:
        wanted = {}
        for pod in self.core.list_pod_for_all_namespaces().items:
            for container in pod.spec.containers:
                op = operator_for(container.image or "")
                if op and _ready(pod):
                    wanted[f"{self.env}-{pod.metadata.namespace}-{pod.metadata.name}-{container.name}"] = (
                        pod, container, op)
        for name in list(self.running):
            if name not in wanted:
                self.log(f"operator pods {self.env}: pod of {name} is gone: stopping the process")
                self._stop(name)
        for name, (pod, container, op) in wanted.items():
            entry = self.running.get(name)
            if entry is None:
                self._start(name, pod, container, op)
            else:
                self._project_volumes(pod, container, entry["mounts"])
                self._check_gates(name, entry)

    # --- starting and stopping -------------------------------------------------------------------------------
    def _start(self, name: str, pod, container, op: OperatorImage) -> None:
        root = self.directory / "pods" / name
        if root.exists():
            shutil.rmtree(root)
        mounts = self._mounts(root, pod, container)
        self._project_volumes(pod, container, mounts)
        ports = {flag: free_port() for flag in [*op.listen_flags, *op.config_ports]}
        args = [*(container.command or [])[1:], *(container.args or [])]
        args = [self._file_argument(arg, mounts, root, op, ports) for arg in args]
        args += [tmpl.format(port=ports[flag]) for flag, tmpl in op.listen_flags.items()]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root),
               "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.server_port),
               # the pod network: Services by DNS name through the cluster's egress proxy (e2e.egress)
               "HTTP_PROXY": f"http://127.0.0.1:{self.egress_port}", "NO_PROXY": "127.0.0.1,localhost",
               **self._env(pod, container)}
        routes = []
        for container_port, flag in op.container_ports.items():
            for svc_ns, svc_name, svc_port in self._services_targeting(pod, container, container_port):
                self.routes.add(svc_ns, svc_name, svc_port, ports[flag])
                routes.append((svc_ns, svc_name, svc_port))
        argv = in_mount_namespace([self.bins[op.binary], *args],
                                  [(m["host"], m["path"]) for m in mounts if not m.get("sub_path")])
        self.sup.start(name, argv, env=env, cwd=root)
        self.running[name] = {"uid": pod.metadata.uid, "mounts": mounts, "routes": routes, "op": op,
                              "pod": pod, "container": container}
        self.log(f"operator pods {self.env}: started {op.binary} for pod {pod.metadata.namespace}/"
                 f"{pod.metadata.name} ({' '.join(args)})")

    @staticmethod
    def _file_argument(arg: str, mounts: list[dict], root: Path, op: OperatorImage, ports: dict) -> str:
        """`--flag=<path>` where <path> is a volume mounted with subPath (a single file, which a bind mount of the
        volume's directory cannot give): the projected file, with the operator's listen addresses moved to the
        ports chosen for it. A subPath mount is not updated in a running container either."""
        flag, sep, value = arg.partition("=")
        mount = next((m for m in mounts if m.get("sub_path") and sep and value == m["path"]), None)
        if mount is None:
            return arg
        text = (Path(mount["host"]) / mount["sub_path"]).read_text()
        for name, (pattern, replacement) in op.config_ports.items():
            text = re.sub(pattern, replacement.replace("{port}", str(ports[name])), text)
        config = root / "config" / Path(mount["sub_path"]).name
        _write_atomic(config, text.encode())
        return f"{flag}={config}"

    def _stop(self, name: str) -> None:
        entry = self.running.pop(name, None)
        self.sup.stop(name)
        for route in (entry or {}).get("routes", []):
            self.routes.remove(*route)

    def _check_gates(self, name: str, entry: dict) -> None:
        """A substitute build (e2e.components: KubeRay) may not know a feature gate the pinned version's chart
        sets. A gate set to false is the behaviour of a version without it: drop it and say so; any other
        unknown gate stays, and the operator keeps failing on it (visibly, in its log)."""
        proc = self.sup.processes.get(name)
        if proc is None or proc.alive() or not proc.log.exists():
            return
        unknown = set(UNKNOWN_GATE.findall(proc.log.read_text(errors="replace")[-4000:]))
        argv = proc.argv
        changed = False
        for i, arg in enumerate(argv):
            if not arg.startswith("--feature-gates="):
                continue
            gates = [g for g in arg.split("=", 1)[1].split(",") if g]
            kept = [g for g in gates if not (g.split("=")[0] in unknown and g.split("=")[1] == "false")]
            if kept != gates:
                dropped = sorted(set(gates) - set(kept))
                self.log(f"operator pods {self.env}: {entry['op'].binary} (built version) does not know "
                         f"{', '.join(dropped)}; dropped (false is the behaviour without the gate)")
                argv[i] = "--feature-gates=" + ",".join(kept)
                changed = True
        if changed:
            proc.next_start = 0.0
            proc.restarts = 0

    # --- the pod's environment -------------------------------------------------------------------------------
    def _env(self, pod, container) -> dict:
        out = {}
        for var in container.env or []:
            if var.value is not None:
                out[var.name] = var.value
                continue
            source = var.value_from
            if source is None:
                continue
            if source.field_ref:
                out[var.name] = _field(pod, source.field_ref.field_path)
            elif source.secret_key_ref:
                value = self._key(pod.metadata.namespace, "secret", source.secret_key_ref)
                if value is not None:
                    out[var.name] = value.decode()
            elif source.config_map_key_ref:
                value = self._key(pod.metadata.namespace, "configmap", source.config_map_key_ref)
                if value is not None:
                    out[var.name] = value.decode()
        return out

    def _key(self, namespace: str, kind: str, ref) -> bytes | None:
        from kubernetes.client.rest import ApiException
        try:
            if kind == "secret":
                data = self.core.read_namespaced_secret(ref.name, namespace).data or {}
                return base64.b64decode(data[ref.key]) if ref.key in data else None
            data = self.core.read_namespaced_config_map(ref.name, namespace).data or {}
            return data[ref.key].encode() if ref.key in data else None
        except ApiException:
            return None

    def _mounts(self, root: Path, pod, container) -> list[dict]:
        mounts = []
        if pod.spec.automount_service_account_token is not False:
            mounts.append({"path": SA_DIR, "host": str(root / "serviceaccount"), "kind": "serviceaccount"})
        volumes = {v.name: v for v in pod.spec.volumes or []}
        for mount in container.volume_mounts or []:
            if mount.mount_path == SA_DIR:
                continue
            volume = volumes.get(mount.name)
            kind = ("secret" if volume and volume.secret else "configmap" if volume and volume.config_map
                    else "downward" if volume and volume.downward_api else "dir")
            mounts.append({"path": mount.mount_path, "host": str(root / "volumes" / mount.name), "kind": kind,
                           "volume": volume, "sub_path": mount.sub_path or ""})
        for m in mounts:
            Path(m["host"]).mkdir(parents=True, exist_ok=True)
        return mounts

    def _project_volumes(self, pod, container, mounts: list[dict]) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        namespace = pod.metadata.namespace
        for m in mounts:
            host = Path(m["host"])
            if m["kind"] == "serviceaccount" and not (host / "token").exists():
                request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                    audiences=["https://kubernetes.default.svc"], expiration_seconds=86400,
                    bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1",
                                                                   name=pod.metadata.name, uid=pod.metadata.uid)))
                token = self.core.create_namespaced_service_account_token(
                    pod.spec.service_account_name or "default", namespace, request).status.token
                _write_atomic(host / "token", token.encode())
                _write_atomic(host / "ca.crt", self.ca_file.read_bytes())
                _write_atomic(host / "namespace", namespace.encode())
            elif m["kind"] == "downward":  # the pod's own fields as files (the training-operator's template)
                for item in m["volume"].downward_api.items or []:
                    if item.field_ref:
                        _write_atomic(host / item.path, _field(pod, item.field_ref.field_path).encode())
            elif m["kind"] in ("secret", "configmap"):
                volume = m["volume"]
                try:
                    if m["kind"] == "secret":
                        data = {k: base64.b64decode(v) for k, v in
                                (self.core.read_namespaced_secret(volume.secret.secret_name, namespace).data
                                 or {}).items()}
                    else:
                        data = {k: v.encode() for k, v in
                                (self.core.read_namespaced_config_map(volume.config_map.name, namespace).data
                                 or {}).items()}
                except ApiException:
                    continue  # an optional or not-yet-created source: the kubelet would wait too
                for key, value in data.items():
                    _write_atomic(host / key, value)

    def _services_targeting(self, pod, container, container_port: int) -> list[tuple[str, str, int]]:
        names = {p.name for p in container.ports or [] if p.container_port == container_port and p.name}
        labels = pod.metadata.labels or {}
        out = []
        for svc in self.core.list_namespaced_service(pod.metadata.namespace).items:
            selector = svc.spec.selector or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            for port in svc.spec.ports or []:
                target = port.target_port if port.target_port is not None else port.port
                if target == container_port or str(target) == str(container_port) or target in names:
                    out.append((pod.metadata.namespace, svc.metadata.name, port.port))
        return out


FIELD_KEY = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


def _field(pod, path: str) -> str:
    keyed = FIELD_KEY.match(path)
    if keyed:
        kind, key = keyed.groups()
        return str((getattr(pod.metadata, kind) or {}).get(key, ""))
    values = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
              "metadata.uid": pod.metadata.uid, "spec.nodeName": pod.spec.node_name,
              "spec.serviceAccountName": pod.spec.service_account_name, "status.podIP": pod.status.pod_ip,
              "status.hostIP": pod.status.host_ip}
    return str(values.get(path) or "")
