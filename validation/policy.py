"""Policy checks over rendered manifests (and the environments' input files): ``check_policies`` -> violations.

Each rule has a name; a violation prints as ``<rule>: <file>: <where in the document>: <what is wrong and what to
do>``. See ``RULES`` for what each rule guards.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .env_facts import EnvFacts
from .manifests import Manifest, load_manifests, load_yaml_documents
from .pod_templates import Container, iter_containers, iter_mappings, iter_ray_cluster_specs, iter_ray_group_specs
from .report import display_path
from .schema_errors import format_path
from .secrets_scan import names_a_secret, scan_text
from .secrets_scan import scan as scan_secrets

GPU_RESOURCES = ("nvidia.com/gpu",)
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# What EFA needs in the pod: libfabric's provider. FI_EFA_USE_DEVICE_RDMA and FI_EFA_FORK_SAFE are legacy for
# current aws-ofi-nccl (it sets what it needs itself, NCCL_PROTO included); the EKS profile keeps seed-001's values,
# but they are not required. No capability either: IPC_LOCK does nothing for a non-root process.
EFA_ENV = {"FI_PROVIDER": "efa"}
# The training image's EFA build (training/Dockerfile VARIANT=efa: libfabric and aws-ofi-nccl); without them NCCL
# cannot use EFA and falls back to TCP sockets (NET/Socket in its log).
EFA_IMAGE_TAG = re.compile(r"-efa$")
DASHBOARD_PORT = 8265
EXTERNAL_SERVICE_TYPES = ("NodePort", "LoadBalancer")
_MUTABLE_TAG = re.compile(r"^(latest|nightly)([-_.].*)?$", re.IGNORECASE)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Violation:
    rule: str
    file: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.file}: {self.where}: {self.message}"


@dataclass(frozen=True)
class Rule:
    name: str
    guards: str
    check: Callable[[Sequence[Manifest], EnvFacts], Iterator[Violation]]


def _v(rule: str, manifest: Manifest, path: Sequence[Any], message: str) -> Violation:
    return Violation(rule, display_path(manifest.path), format_path(path), message)


def _quantity_positive(value: Any) -> bool:
    """Whether a resource quantity is more than zero (``0``, ``"0"``, ``"0m"`` are not)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return value > 0
    match = re.match(r"^\s*([0-9.]+)", str(value))
    try:
        return bool(match) and float(match.group(1)) > 0  # type: ignore[union-attr]
    except ValueError:
        return True


def _resource_sections(container: dict) -> dict[str, dict]:
    resources = container.get("resources") if isinstance(container.get("resources"), dict) else {}
    return {section: resources.get(section) if isinstance(resources.get(section), dict) else {}
            for section in ("requests", "limits")}


def _requests(container: dict, resource: str) -> bool:
    return any(_quantity_positive(section.get(resource)) for section in _resource_sections(container).values())


def _env(container: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in container.get("env") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            out[entry["name"]] = entry.get("value") if "value" in entry else entry.get("valueFrom")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------------------------

def rule_resources_required(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    for m in manifests:
        for c in iter_containers(m.doc):
            sections = _resource_sections(c.container)
            missing = [f"{section}.{res}" for section in ("requests", "limits") for res in ("cpu", "memory")
                       if sections[section].get(res) in (None, "")]
            if missing:
                yield _v("resources-required", m, c.path + ["resources"],
                         f"{c.label} has no {', '.join(missing)}; set CPU and memory requests and limits on every "
                         f"container (scheduling, ResourceQuota and node stability depend on them)")


def image_problem(image: Any) -> str | None:
    """Why an image reference is not pinned (``None`` when it is: a tag other than latest/nightly, or a digest)."""
    if not isinstance(image, str) or not image.strip():
        return "has no image"
    if "@" in image:
        digest = image.split("@", 1)[1]
        return None if _DIGEST.match(digest) else f"has a malformed digest {digest!r} (expected sha256:<64 hex>)"
    last_slash, colon = image.rfind("/"), image.rfind(":")
    if colon <= last_slash:
        return f"image {image!r} has no tag, so it floats on :latest"
    tag = image[colon + 1:]
    if _MUTABLE_TAG.match(tag):
        return f"image {image!r} uses the moving tag {tag!r}"
    return None


def rule_image_pinned(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    advice = "pin a release tag (e.g. rayproject/ray:2.60.0-py311) or a digest (@sha256:...)"
    for m in manifests:
        for c in iter_containers(m.doc):
            problem = image_problem(c.container.get("image"))
            if problem:
                yield _v("image-pinned", m, c.path + ["image"], f"{c.label} {problem}; {advice}")
        for path, cluster in iter_ray_cluster_specs(m.doc):
            autoscaler = cluster.get("autoscalerOptions")
            if isinstance(autoscaler, dict) and "image" in autoscaler:
                problem = image_problem(autoscaler.get("image"))
                if problem:
                    yield _v("image-pinned", m, path + ["autoscalerOptions", "image"],
                             f"the Ray autoscaler {problem}; {advice}")


# Keys of typed Secrets (kubernetes.io/tls, dockerconfigjson, dockercfg, ssh-auth, basic-auth) that hold secrets.
TYPED_SECRET_KEYS = {"tls.key", ".dockerconfigjson", ".dockercfg", "ssh-privatekey", "password"}


def _secret_kind_findings(m: Manifest) -> Iterator[Violation]:
    """A Secret committed to git: its values are plaintext (``data`` is only base64). Argo CD's declarative setup
    needs some Secrets (cluster/repository registrations with IRSA or no credentials): those pass when no key
    names a secret and no value holds one (embedded JSON/YAML like a cluster ``config`` is scanned too)."""
    advice = ("is committed to git in plain text (base64 is not encryption); create the Secret outside git (or use "
              "a sealed/external secret) and reference it by name")
    for section in ("data", "stringData"):
        data = (m.doc or {}).get(section)
        if not isinstance(data, dict):
            continue
        for key, value in data.items():
            if value in (None, ""):
                continue
            text = str(value) if section == "stringData" else _b64decode(value)
            if names_a_secret(str(key)) or str(key) in TYPED_SECRET_KEYS:
                yield _v("no-plaintext-secrets", m, [section, key], f"the Secret's {key!r} value {advice}")
                continue
            for finding in scan_text(text, [section, key]):
                yield _v("no-plaintext-secrets", m, finding.path, f"{finding.message} (the Secret {advice})")


def _b64decode(value: object) -> str:
    try:
        return base64.b64decode(str(value), validate=False).decode("utf-8", errors="replace")
    except (ValueError, binascii.Error):
        return str(value)


def rule_no_plaintext_secrets(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    for m in manifests:
        skip: tuple[tuple, ...] = ()
        if m.kind == "Secret" and m.api_version == "v1":
            yield from _secret_kind_findings(m)
            skip = (("data",), ("stringData",))
        for finding in scan_secrets(m.doc, [], skip):
            yield _v("no-plaintext-secrets", m, finding.path, finding.message)


def environment_file_secrets(path: Path) -> Iterator[Violation]:
    """``no-plaintext-secrets`` over an environment's input file (``environments/<env>.yaml``)."""
    try:
        docs = load_yaml_documents(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        yield Violation("no-plaintext-secrets", display_path(path), "(file)", f"cannot be read: {exc}")
        return
    for index, doc in enumerate(docs):
        for finding in scan_secrets(doc):
            where = format_path(finding.path) if len(docs) == 1 else f"document {index}: {format_path(finding.path)}"
            yield Violation("no-plaintext-secrets", display_path(path), where, finding.message)


def rule_gpu_only_on_gpu_env(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    if facts.gpu_nodes:
        return
    why = (f"environment {facts.name!r} has no GPU nodes (capabilities.gpu is false), so the pods would stay "
           f"Pending; drop the GPU request in this environment's values, or enable capabilities.gpu if it has GPUs")
    for m in manifests:
        for c in iter_containers(m.doc):
            for resource in GPU_RESOURCES:
                if _requests(c.container, resource):
                    yield _v("gpu-only-on-gpu-env", m, c.path + ["resources"], f"{c.label} requests {resource}; {why}")
        for path, group in iter_ray_group_specs(m.doc):
            params = group.get("rayStartParams") if isinstance(group.get("rayStartParams"), dict) else {}
            if _quantity_positive(params.get("num-gpus")):
                yield _v("gpu-only-on-gpu-env", m, path + ["rayStartParams", "num-gpus"],
                         f"Ray is told the node has GPUs; {why}")
        spec = (m.doc or {}).get("spec")
        if m.kind == "RayJob" and isinstance(spec, dict) and _quantity_positive(spec.get("entrypointNumGpus")):
            yield _v("gpu-only-on-gpu-env", m, ["spec", "entrypointNumGpus"], f"the entrypoint asks for GPUs; {why}")


def rule_efa_complete(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    for m in manifests:
        for c in iter_containers(m.doc):
            if not _requests(c.container, EFA_RESOURCE):
                continue
            problems = _efa_problems(c)
            if problems:
                yield _v("efa-complete", m, c.path,
                         f"{c.label} requests {EFA_RESOURCE} but " + "; ".join(problems)
                         + " (without it libfabric does not use the EFA device)")


def _efa_problems(c: Container) -> list[str]:
    problems = []
    env = _env(c.container)
    for name, expected in EFA_ENV.items():
        if name not in env:
            problems.append(f"env {name} is not set (set it to {expected!r})")
        elif str(env[name]) != expected:
            problems.append(f"env {name} is {env[name]!r}, expected {expected!r}")
    return problems


def rule_efa_image(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    for m in manifests:
        for c in iter_containers(m.doc):
            if not _requests(c.container, EFA_RESOURCE):
                continue
            image = str(c.container.get("image") or "")
            tag = image.rsplit("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
            if not EFA_IMAGE_TAG.search(tag):
                yield _v("efa-image", m, c.path + ["image"],
                         f"{c.label} requests {EFA_RESOURCE} but runs {image!r}, not an EFA build (tag "
                         f"<version>-efa: training/Dockerfile VARIANT=efa adds libfabric and aws-ofi-nccl); "
                         f"without them NCCL falls back to TCP sockets")


def rule_efa_only_on_efa_env(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    if facts.efa_nodes is not False:  # True, or unknown (None): not applied
        return
    for m in manifests:
        for c in iter_containers(m.doc):
            if _requests(c.container, EFA_RESOURCE):
                yield _v("efa-only-on-efa-env", m, c.path + ["resources"],
                         f"{c.label} requests {EFA_RESOURCE} but environment {facts.name!r} has no EFA nodes "
                         f"(capabilities.efa is false), so the pods would stay Pending; drop the EFA request in "
                         f"this environment's values")


# --- dashboard-not-exposed -----------------------------------------------------------------------------------

def _selects_ray_head(selector: Any) -> bool:
    if not isinstance(selector, dict):
        return False
    return (str(selector.get("ray.io/node-type", "")) == "head"
            or str(selector.get("ray.io/identifier", "")).endswith("-head"))


def _is_dashboard_port(port: Any) -> bool:
    if not isinstance(port, dict):
        return False
    return (port.get("port") == DASHBOARD_PORT or port.get("targetPort") in (DASHBOARD_PORT, "dashboard")
            or port.get("name") == "dashboard" or port.get("targetPort") == str(DASHBOARD_PORT))


def _service_reaches_dashboard(spec: dict) -> bool:
    return _selects_ray_head(spec.get("selector")) or any(_is_dashboard_port(p) for p in spec.get("ports") or [])


def _is_core_service(m: Manifest) -> bool:
    return m.kind == "Service" and m.api_version == "v1"


def _dashboard_backend(service_name: Any, port: Any, dashboard_services: set[str]) -> bool:
    if not isinstance(service_name, str):
        return False
    number = port.get("number") if isinstance(port, dict) else port
    name = port.get("name") if isinstance(port, dict) else None
    return (number == DASHBOARD_PORT or name == "dashboard" or service_name in dashboard_services
            or (service_name.endswith("-head-svc") and number in (None, DASHBOARD_PORT)))


def rule_dashboard_not_exposed(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    if facts.dashboard_exposure_allowed:
        return
    rule = "dashboard-not-exposed"
    why = (f"the Ray dashboard (port {DASHBOARD_PORT}) has no authentication and accepts job submissions (remote code "
           f"execution); keep it cluster-internal (ClusterIP + kubectl port-forward), or opt this environment in "
           f"explicitly with exposeDashboard: true in environments/{facts.name}.yaml")
    dashboard_services = {m.name for m in manifests
                          if _is_core_service(m) and isinstance((m.doc or {}).get("spec"), dict)
                          and _service_reaches_dashboard(m.doc["spec"])}  # type: ignore[index]
    for m in manifests:
        doc = m.doc or {}
        spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
        if _is_core_service(m) and _service_reaches_dashboard(spec):
            service_type = spec.get("type") or "ClusterIP"
            if service_type in EXTERNAL_SERVICE_TYPES:
                yield _v(rule, m, ["spec", "type"], f"a {service_type} Service reaches the Ray head/dashboard; {why}")
            if spec.get("externalIPs"):
                yield _v(rule, m, ["spec", "externalIPs"], f"a Service with externalIPs reaches the Ray "
                                                           f"head/dashboard; {why}")
        for path, cluster in iter_ray_cluster_specs(doc):
            head = cluster["headGroupSpec"]
            if head.get("serviceType") in EXTERNAL_SERVICE_TYPES:
                yield _v(rule, m, path + ["headGroupSpec", "serviceType"],
                         f"the head service is of type {head['serviceType']}; {why}")
            if head.get("enableIngress") is True:
                yield _v(rule, m, path + ["headGroupSpec", "enableIngress"],
                         f"KubeRay creates an Ingress to the head (dashboard); {why}")
            head_service = head.get("headService") if isinstance(head.get("headService"), dict) else {}
            head_service_spec = head_service.get("spec") if isinstance(head_service.get("spec"), dict) else {}
            if head_service_spec.get("type") in EXTERNAL_SERVICE_TYPES:
                yield _v(rule, m, path + ["headGroupSpec", "headService", "spec", "type"],
                         f"the head service is of type {head_service_spec['type']}; {why}")
        if m.kind == "Ingress" and m.api_version.startswith("networking.k8s.io/"):
            for bpath, backend in _ingress_backends(spec):
                service = backend.get("service") if isinstance(backend.get("service"), dict) else {}
                if _dashboard_backend(service.get("name"), service.get("port"), dashboard_services):
                    yield _v(rule, m, bpath, f"an Ingress routes to the Ray dashboard "
                                             f"(service {service.get('name')!r}); {why}")
        if m.kind == "NetworkPolicy" and m.api_version.startswith("networking.k8s.io/"):
            for r, ingress in enumerate(spec.get("ingress") or []):
                if not isinstance(ingress, dict):
                    continue
                ports = [p.get("port") for p in ingress.get("ports") or [] if isinstance(p, dict)]
                opens = not ports or DASHBOARD_PORT in ports or "dashboard" in ports
                for f, peer in enumerate(ingress.get("from") or []):
                    if opens and isinstance(peer, dict) and isinstance(peer.get("ipBlock"), dict):
                        yield _v(rule, m, ["spec", "ingress", r, "from", f, "ipBlock"],
                                 f"a NetworkPolicy admits addresses ({peer['ipBlock'].get('cidr')}) to the Ray "
                                 f"dashboard; {why}")
        if m.api_version.startswith("gateway.networking.k8s.io/") and m.kind.endswith("Route"):
            for path, node in iter_mappings(spec):
                for index, ref in enumerate(node.get("backendRefs") or []):
                    if isinstance(ref, dict) and ref.get("kind", "Service") == "Service" and _dashboard_backend(
                            ref.get("name"), ref.get("port"), dashboard_services):
                        yield _v(rule, m, ["spec"] + path + ["backendRefs", index],
                                 f"a {m.kind} routes to the Ray dashboard (service {ref.get('name')!r}); {why}")


def _network_policies(manifests: Sequence[Manifest]) -> list[tuple[Manifest, dict]]:
    """(manifest, spec) of every ingress NetworkPolicy."""
    out = []
    for m in manifests:
        spec = (m.doc or {}).get("spec")
        if m.kind == "NetworkPolicy" and m.api_version.startswith("networking.k8s.io/") and isinstance(spec, dict):
            if "Ingress" in (spec.get("policyTypes") or ["Ingress"]):
                out.append((m, spec))
    return out


def _selects(selector: Any, labels: dict) -> bool:
    """A podSelector's matchLabels (matchExpressions make it no match here: we render none) selects these labels."""
    if not isinstance(selector, dict) or selector.get("matchExpressions"):
        return False
    wanted = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _same_namespace(a: Any, b: Any) -> bool:
    """A manifest without a namespace lands in its app's destination namespace: it matches any."""
    return a is None or b is None or a == b


def _workload_templates(doc: dict) -> Iterator[tuple[list, dict]]:
    """(path, pod template) of the pods an operator makes: Ray head and worker groups, PyTorchJob replicas."""
    for path, group in iter_ray_group_specs(doc):
        if isinstance(group.get("template"), dict):
            yield path + ["template"], group["template"]
    if doc.get("kind") == "PyTorchJob":
        for name, replica in ((doc.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
            if isinstance(replica, dict) and isinstance(replica.get("template"), dict):
                yield ["spec", "pytorchReplicaSpecs", name, "template"], replica["template"]


def rule_network_policy(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    """What no scanner of single resources can know: that the pods the operators make from a RayCluster's, a
    RayJob's or a PyTorchJob's templates are selected by a NetworkPolicy of the same namespace."""
    rule = "network-policy"
    policies = _network_policies(manifests)
    for m in manifests:
        doc = m.doc or {}
        if m.kind not in ("RayCluster", "RayJob", "RayService", "PyTorchJob") or not isinstance(doc.get("spec"), dict):
            continue
        if m.kind == "RayJob" and doc["spec"].get("clusterSelector"):
            continue  # runs on an existing cluster: that cluster's policy applies
        namespace = (doc.get("metadata") or {}).get("namespace")
        for path, template in _workload_templates(doc):
            labels = ((template.get("metadata") or {}).get("labels") or {})
            if not any(_same_namespace(((p.doc or {}).get("metadata") or {}).get("namespace"), namespace)
                       and _selects(spec.get("podSelector"), labels) for p, spec in policies):
                yield _v(rule, m, path + ["metadata", "labels"],
                         "no NetworkPolicy selects these pods: their ports (Ray: GCS 6379, dashboard 8265, client "
                         "10001, no authentication unless token auth is on; torchrun: rendezvous and NCCL) accept "
                         "every pod of the cluster; render one around them (the charts' networkPolicy.enabled)")


def _ingress_backends(spec: dict) -> Iterator[tuple[list, dict]]:
    if isinstance(spec.get("defaultBackend"), dict):
        yield ["spec", "defaultBackend"], spec["defaultBackend"]
    for r, rule in enumerate(spec.get("rules") or []):
        http = rule.get("http") if isinstance(rule, dict) and isinstance(rule.get("http"), dict) else {}
        for p, item in enumerate(http.get("paths") or []):
            if isinstance(item, dict) and isinstance(item.get("backend"), dict):
                yield ["spec", "rules", r, "http", "paths", p, "backend"], item["backend"]


# Where Ray and Python must be able to write: Ray's session directory is /tmp/ray (its sockets, logs and spilled
# objects; `ray start` fails without it), Python's tempfile and torch.compile use $TMPDIR or /tmp.
SCRATCH_PATHS = ("/tmp", "/tmp/ray")
WRITABLE_VOLUMES = ("emptyDir", "ephemeral", "persistentVolumeClaim", "hostPath", "csi")


def _scratch_problem(c: Container) -> str | None:
    env = _env(c.container)
    wanted = [str(env["TMPDIR"])] if env.get("TMPDIR") else list(SCRATCH_PATHS)
    volumes = {v.get("name"): v for v in c.pod.get("volumes") or [] if isinstance(v, dict)}
    for mount in c.container.get("volumeMounts") or []:
        if not isinstance(mount, dict) or str(mount.get("mountPath", "")).rstrip("/") not in wanted:
            continue
        volume = volumes.get(mount.get("name"), {})
        if mount.get("readOnly"):
            return f"its mount at {mount['mountPath']} is readOnly"
        if not any(kind in volume for kind in WRITABLE_VOLUMES):
            return (f"its mount at {mount['mountPath']} is volume {mount.get('name')!r}, which is not a writable "
                    f"kind ({', '.join(WRITABLE_VOLUMES)})")
        return None
    return f"nothing writable is mounted at {' or '.join(wanted)}"


def _runs_the_pods_software(c: Container) -> bool:
    """A pod's containers, and its init containers that run one of their images (KubeRay's wait-gcs-ready runs
    `ray health-check` in the Ray image). An init container of another image (the training-operator's init-pytorch:
    nslookup in alpine) is not Ray or Python: it needs no /tmp."""
    if not c.init:
        return True
    return c.container.get("image") in {x.get("image") for x in c.pod.get("containers") or [] if isinstance(x, dict)}


def rule_readonly_root_scratch(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    for m in manifests:
        for c in iter_containers(m.doc):
            context = c.container.get("securityContext")
            if not (isinstance(context, dict) and context.get("readOnlyRootFilesystem") is True):
                continue
            if not _runs_the_pods_software(c):
                continue
            problem = _scratch_problem(c)
            if problem:
                yield _v("readonly-root-scratch", m, c.path + ["securityContext", "readOnlyRootFilesystem"],
                         f"{c.label} has a read-only root filesystem but {problem}: Ray writes its session directory "
                         f"to /tmp/ray and Python its temporary files to /tmp, so the container fails at start; "
                         f"mount an emptyDir there (the charts' scratch.enabled)")


# --- checkpoint-storage-shared -----------------------------------------------------------------------------------

# How `python -m training run` chooses its storage: checkpoint.storagePath of the spec, else $TRAINING_STORAGE_PATH,
# else ./results/training under the working directory (training/job/defaults.py).
STORAGE_ENV = "TRAINING_STORAGE_PATH"
DEFAULT_STORAGE = "./results/training"
_TRAINING_RUN = re.compile(r"(?:^|\s)(?:-m\s+)?training\s+run(?:\s|$)")
# Volumes every pod that mounts them shares (network file systems); a claim is shared when it is ReadWriteMany.
SHARED_VOLUME_KINDS = ("nfs", "cephfs", "glusterfs", "azureFile")


@dataclass(frozen=True)
class _Storage:
    path: str
    source: str        # spec | runtimeEnv | env | default
    where: list        # where in the document it is decided


def _ray_container(template: dict) -> dict:
    containers = ((template.get("spec") or {}).get("containers") or [{}]) if isinstance(template, dict) else [{}]
    return containers[0] if isinstance(containers[0], dict) else {}


def _spec_storage(m: Manifest, manifests: Sequence[Manifest], entrypoint: str, head: dict) -> str | None:
    """checkpoint.storagePath of the job spec the entrypoint runs, read from the ConfigMap mounted where it points."""
    try:
        tokens = shlex.split(entrypoint)
    except ValueError:
        return None
    after = tokens[tokens.index("run") + 1:] if "run" in tokens else []
    spec_file = next((t for t in after if not t.startswith("-")), None)
    if not spec_file:
        return None
    pod = (head.get("template") or {}).get("spec") or {}
    volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
    for mount in _ray_container(head.get("template") or {}).get("volumeMounts") or []:
        base = str(mount.get("mountPath", "")).rstrip("/") + "/"
        config_map = (volumes.get(mount.get("name")) or {}).get("configMap")
        if not spec_file.startswith(base) or not isinstance(config_map, dict):
            continue
        key = spec_file[len(base):]
        key = next((i.get("key") for i in config_map.get("items") or [] if i.get("path") == key), key)
        namespace = (m.doc.get("metadata") or {}).get("namespace")
        for cm in manifests:
            if cm.kind == "ConfigMap" and cm.name == config_map.get("name") and _same_namespace(
                    (cm.doc.get("metadata") or {}).get("namespace"), namespace):
                try:
                    spec = yaml.safe_load(((cm.doc.get("data") or {}).get(key)) or "") or {}
                except yaml.YAMLError:
                    return None
                storage = (spec.get("checkpoint") or {}).get("storagePath") if isinstance(spec, dict) else None
                return storage if isinstance(storage, str) and storage else None
    return None


def _job_storage(m: Manifest, manifests: Sequence[Manifest], cluster_path: list, cluster: dict) -> _Storage | None:
    """Where the training package of this cluster's job would put checkpoints, and where that is decided; ``None``
    when the cluster runs no training job this can know of (another entrypoint and no TRAINING_STORAGE_PATH, or a
    value from a reference)."""
    head = cluster["headGroupSpec"]
    container = _ray_container(head.get("template") or {})
    containers_path = cluster_path + ["headGroupSpec", "template", "spec", "containers", 0]
    spec = m.doc.get("spec") or {}
    entrypoint = spec.get("entrypoint") if m.kind == "RayJob" and isinstance(spec.get("entrypoint"), str) else ""
    runs_training = bool(_TRAINING_RUN.search(entrypoint))
    if runs_training:
        from_spec = _spec_storage(m, manifests, entrypoint, head)
        if from_spec:
            return _Storage(from_spec, "spec", ["spec", "entrypoint"])
        try:
            runtime_env = yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {}
        except yaml.YAMLError:
            runtime_env = {}
        env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else None
        if isinstance(env_vars, dict) and isinstance(env_vars.get(STORAGE_ENV), str):
            return _Storage(env_vars[STORAGE_ENV], "runtimeEnv", ["spec", "runtimeEnvYAML"])
    for index, entry in enumerate(container.get("env") or []):
        if isinstance(entry, dict) and entry.get("name") == STORAGE_ENV:
            if not isinstance(entry.get("value"), str):
                return None  # valueFrom: not knowable here
            return _Storage(entry["value"], "env", containers_path + ["env", index])
    return _Storage(DEFAULT_STORAGE, "default", ["spec", "entrypoint"]) if runs_training else None


def _pod_groups(cluster_path: list, cluster: dict) -> Iterator[tuple[str, list, dict, int]]:
    """(label, path, pod template, most pods) of the head and of each worker group that can have pods."""
    yield "the head", cluster_path + ["headGroupSpec", "template"], cluster["headGroupSpec"].get("template") or {}, 1
    autoscaling = cluster.get("enableInTreeAutoscaling") is True
    for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
        if not isinstance(group, dict):
            continue
        counts = [group.get(k) for k in ("replicas", "minReplicas") + (("maxReplicas",) if autoscaling else ())]
        most = max([c for c in counts if isinstance(c, int)] or [0])
        if most > 0:
            yield (f"worker group {group.get('groupName', index)!r}",
                   cluster_path + ["workerGroupSpecs", index, "template"], group.get("template") or {}, most)


def _claims(manifests: Sequence[Manifest]) -> dict[tuple[Any, str], list]:
    return {((m.doc.get("metadata") or {}).get("namespace"), m.name): list((m.doc.get("spec") or {}).get(
        "accessModes") or []) for m in manifests if m.kind == "PersistentVolumeClaim" and m.api_version == "v1"}


def _private_storage(path: str, template: dict, claims: dict, namespace: Any) -> str | None:
    """Why a local ``path`` is private to this pod (``None`` when every pod of the template shares it)."""
    if not path.startswith("/"):
        return "a path relative to the container's working directory, on its own filesystem"
    container = _ray_container(template)
    mounts = [mt for mt in container.get("volumeMounts") or [] if isinstance(mt, dict)
              and (path.rstrip("/") + "/").startswith(str(mt.get("mountPath", "")).rstrip("/") + "/")]
    if not mounts:
        return "on the container's own filesystem (no volume is mounted there)"
    mount = max(mounts, key=lambda mt: len(str(mt.get("mountPath", ""))))
    volume = next((v for v in (template.get("spec") or {}).get("volumes") or []
                   if isinstance(v, dict) and v.get("name") == mount.get("name")), {})
    kind = next((k for k in volume if k != "name"), "unknown")
    if mount.get("readOnly"):
        return f"volume {mount.get('name')!r} mounted read-only at {mount.get('mountPath')}"
    if kind in SHARED_VOLUME_KINDS:
        return None
    if kind == "persistentVolumeClaim":
        name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        modes = next((modes for (ns, claim), modes in claims.items() if claim == name and _same_namespace(ns, namespace)),
                     None)
        if modes is None or "ReadWriteMany" in modes:
            return None  # a claim made outside this repository: its access modes are not known here
        return f"claim {name!r} at {mount.get('mountPath')}, which is {', '.join(modes)}: mounted by one node only"
    return f"volume {mount.get('name')!r} at {mount.get('mountPath')} is {kind}: each pod has its own"


def _storage_inputs(m: Manifest, source: str) -> list[tuple]:
    """The environment keys that decide a cluster's storage, most specific first."""
    app = Path(m.path).parent.name
    if app.startswith("job-"):
        job = app[len("job-"):]
        if source == "spec":
            return [("jobs", job, "job", "spec", "checkpoint", "storagePath"),
                    ("jobDefaults", "job", "spec", "checkpoint", "storagePath")]
        return [("jobs", job, "cluster", "checkpoints"), ("jobDefaults", "cluster", "checkpoints"),
                ("cluster", "checkpoints")]
    return [("rayCluster", "values", "checkpoints"), ("cluster", "checkpoints")]


def rule_checkpoint_storage_shared(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    """A Ray cluster of several pods whose training job checkpoints to storage one pod alone sees: Ray Train V2
    refuses it as soon as a worker in another pod saves (its storage marker is missing there), after the first
    epochs have been paid for."""
    claims = _claims(manifests)
    for m in manifests:
        if m.kind not in ("RayJob", "RayCluster") or not isinstance(m.doc.get("spec"), dict):
            continue
        if m.kind == "RayJob" and m.doc["spec"].get("clusterSelector"):
            continue  # runs on an existing cluster: that cluster's storage applies
        namespace = (m.doc.get("metadata") or {}).get("namespace")
        for cluster_path, cluster in iter_ray_cluster_specs(m.doc):
            storage = _job_storage(m, manifests, cluster_path, cluster)
            groups = list(_pod_groups(cluster_path, cluster))
            if storage is None or len(groups) < 2 or (is_uri(storage.path) and not storage.path.startswith("file:")):
                continue
            path = storage.path[len("file://"):] if storage.path.startswith("file://") else storage.path
            private = [f"{label}: {why}" for label, _, template, _ in groups
                       if (why := _private_storage(path, template, claims, namespace))]
            if not private:
                continue
            pods = sum(most for *_, most in groups)
            source = {"spec": "the job spec's checkpoint.storagePath", "runtimeEnv": f"the job's runtime env {STORAGE_ENV}",
                      "env": STORAGE_ENV, "default": f"the default: neither checkpoint.storagePath nor {STORAGE_ENV}"
                      }[storage.source]
            where = facts.where(*_storage_inputs(m, storage.source))
            yield _v("checkpoint-storage-shared", m, storage.where,
                     f"a Ray cluster of {'up to ' if cluster.get('enableInTreeAutoscaling') else ''}{pods} pods "
                     f"checkpoints to {storage.path} ({source}), which is not shared: {'; '.join(private)}. Ray Train "
                     f"fails as soon as a worker in another pod saves a checkpoint (the training package refuses it "
                     f"before training starts); give every pod the same storage: cluster.checkpoints with store: s3 "
                     f"(an S3-compatible store: the platform chart's objectStore, or AWS S3) or store: volume with a "
                     f"ReadWriteMany claim" + (f" (input: {where})" if where else ""))


def rule_workload_namespaced_only(manifests: Sequence[Manifest], facts: EnvFacts) -> Iterator[Violation]:
    """A folder of apps/<env>/ other than platform is a workload app (the ApplicationSet makes it an Application of
    the <env> project): no RBAC, nothing cluster-scoped (generator/scopes.py holds the rule the render keeps too)."""
    from generator import scopes
    for m in manifests:
        if m.path.parent.name == scopes.PLATFORM_APP:
            continue
        refusal = scopes.workload_refusal(m.api_version, m.kind)
        if refusal:
            yield _v("workload-namespaced-only", m, ["kind"],
                     f"{refusal}; the workload project refuses it at sync; {scopes.WHERE_INSTEAD}")


def is_uri(path: str) -> bool:
    return "://" in path


RULES: dict[str, Rule] = {rule.name: rule for rule in (
    Rule("resources-required", "every container and init container has CPU and memory requests and limits",
         rule_resources_required),
    Rule("image-pinned", "every image has a release tag or a digest (no tag, :latest or :nightly is an error)",
         rule_image_pinned),
    Rule("no-plaintext-secrets", "no literal secret values in rendered output or environments/*.yaml; Secrets "
                                 "are referenced, never committed", rule_no_plaintext_secrets),
    Rule("gpu-only-on-gpu-env", "GPU requests (nvidia.com/gpu, Ray num-gpus) only where the environment has GPU "
                                "nodes", rule_gpu_only_on_gpu_env),
    Rule("efa-complete", "a container requesting vpc.amazonaws.com/efa sets FI_PROVIDER=efa",
         rule_efa_complete),
    Rule("efa-image", "a container requesting vpc.amazonaws.com/efa runs an EFA build of its image (tag "
                      "<version>-efa: libfabric and aws-ofi-nccl)", rule_efa_image),
    Rule("efa-only-on-efa-env", "EFA requests only where the environment has EFA nodes (when that is known)",
         rule_efa_only_on_efa_env),
    Rule("dashboard-not-exposed", "the Ray dashboard (8265) is not reachable from outside the cluster (a Service, "
                                  "an Ingress or Route, a NetworkPolicy ipBlock) unless the environment sets "
                                  "exposeDashboard: true", rule_dashboard_not_exposed),
    Rule("readonly-root-scratch", "a container with a read-only root filesystem has a writable volume at /tmp "
                                  "(or $TMPDIR): Ray's session directory and Python's temporary files (init "
                                  "containers of another image than the pod's are not Ray: not checked)",
         rule_readonly_root_scratch),
    Rule("network-policy", "the pods of every Ray cluster (RayCluster, a RayJob's cluster) and of every PyTorchJob "
                           "are selected by a NetworkPolicy of their namespace", rule_network_policy),
    Rule("checkpoint-storage-shared", "a Ray cluster of more than one pod running the training package (a RayJob's "
                                      "`training run`, or any cluster setting TRAINING_STORAGE_PATH) checkpoints to "
                                      "storage every pod shares: a URI (s3://, gs://) or a volume of every pod that "
                                      "is a ReadWriteMany claim or a network file system; not a container's own "
                                      "filesystem, an emptyDir, a hostPath or a ReadWriteOnce claim",
         rule_checkpoint_storage_shared),
    Rule("workload-namespaced-only", "a workload app (any folder of apps/<env>/ but platform) renders no RBAC and "
                                     "nothing cluster-scoped: only the platform project may",
         rule_workload_namespaced_only),
)}


def check_documents(manifests: Sequence[Manifest], env_facts: EnvFacts,
                    rules: Iterable[str] | None = None) -> list[Violation]:
    """Run the rules (all by default) over already loaded manifests; unreadable ones are reported once."""
    violations: list[Violation] = []
    readable = []
    for m in manifests:
        if m.doc is None:
            violations.append(Violation("manifest-readable", display_path(m.path), "(file)",
                                        f"{m.error}; policies cannot be checked"))
        else:
            readable.append(m)
    for name in rules or RULES:
        violations.extend(RULES[name].check(readable, env_facts))
    return violations


def check_policies(apps_env_dir: str | os.PathLike[str], env_facts: EnvFacts,
                   environment_files: Iterable[str | os.PathLike[str]] = (),
                   rules: Iterable[str] | None = None) -> list[Violation]:
    """Every policy violation in ``apps_env_dir`` (rendered output) and in ``environment_files`` (inputs)."""
    selected = list(rules or RULES)
    unknown = [r for r in selected if r not in RULES]
    if unknown:
        raise ValueError(f"unknown rule(s): {', '.join(unknown)}; known: {', '.join(RULES)}")
    violations = check_documents(load_manifests(Path(apps_env_dir)), env_facts, selected)
    if "no-plaintext-secrets" in selected:
        for path in environment_files:
            violations.extend(environment_file_secrets(Path(path)))
    return violations
