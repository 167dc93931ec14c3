"""The pods are what we say: what the KubeRay operator and the training-operator create from the synced manifests
(not our manifests themselves) carries what the environment file asks for, schedules on the environment's fake
nodes, and fits the namespace quota. Expectations are read from the environment (environments/<env>.yaml as the
generator composes it), so the test says "what the environment says", not a copy of it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e import nodes
from tests.e2e.harness import RAY, envs_where, wait_for

ENVS = nodes.environments()
PODS_TIMEOUT = 300


def expected_pod_count(e2e, env: str) -> int:
    """Pods the rendered workloads make: RayCluster head + worker replicas (+ a submitter per RayJob), PyTorchJob
    replicas."""
    total = 0
    for app in e2e.app_names(env):
        for doc in e2e.rendered(env, app):
            kind, spec = doc["kind"], doc.get("spec") or {}
            if kind == "RayCluster":
                total += 1 + sum(g.get("replicas", 0) * g.get("numOfHosts", 1) for g in spec["workerGroupSpecs"])
            elif kind == "RayJob":
                cluster = spec["rayClusterSpec"]
                total += 2 + sum(g.get("replicas", 0) * g.get("numOfHosts", 1) for g in cluster["workerGroupSpecs"])
            elif kind == "PyTorchJob":
                total += sum(r.get("replicas", 1) for r in spec["pytorchReplicaSpecs"].values())
    return total


def workload_pods(e2e, env: str) -> list:
    return [p for p in e2e.pods(env) if not p.metadata.deletion_timestamp]


def _not_placed(e2e, env: str):
    """What is wrong now (not in the past: at bootstrap a pod may wait a moment for the platform app's claim or
    quota, which sync beside it): pods missing, unscheduled or not running, with their latest event, and
    RayClusters whose pods KubeRay could not create (ReplicaFailure: quota, admission)."""
    pods = workload_pods(e2e, env)
    expected = expected_pod_count(e2e, env)
    problems = []
    if len(pods) < expected:
        problems.append(f"{len(pods)} of {expected} pods exist")
    latest = {}
    for event in sorted(e2e.events(env), key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp):
        latest[event.involved_object.name] = f"{event.reason}: {(event.message or '')[:200]}"
    for pod in pods:
        if not pod.spec.node_name or pod.status.phase not in ("Running", "Succeeded", "Failed"):
            problems.append(f"pod {pod.metadata.name} {pod.status.phase} on {pod.spec.node_name or 'no node'} "
                            f"({latest.get(pod.metadata.name, 'no event')})")
    for cluster in e2e.objects(env, RAY, "rayclusters"):
        for cond in (cluster.get("status") or {}).get("conditions") or []:
            if cond["type"] == "ReplicaFailure" and cond["status"] == "True":
                problems.append(f"RayCluster {cluster['metadata']['name']}: {cond.get('reason')}: "
                                f"{cond.get('message', '')[:200]}")
    return pods, problems


def _placed(e2e, env: str) -> list:
    """Every pod the workloads make exists and runs on a node (waits for it); the pods."""
    def check():
        pods, problems = _not_placed(e2e, env)
        return not problems, "; ".join(problems[:12]) or pods
    return wait_for(check, PODS_TIMEOUT, 5, f"the {env} workloads' pods were not all placed")


@pytest.mark.parametrize("env", ENVS)
def test_every_pod_schedules_on_the_environments_nodes_within_quota(e2e, bootstrapped, env):
    pods = _placed(e2e, env)
    node_names = {n["metadata"]["name"] for n in nodes.manifests(env)} | {(nodes.real(env) or {}).get("name")}
    assert {p.spec.node_name for p in pods} <= node_names
    for quota in e2e.core(env).list_namespaced_resource_quota(e2e.namespace(env)).items:
        for resource, used in (quota.status.used or {}).items():
            assert _quantity(used) <= _quantity(quota.status.hard[resource]), (quota.metadata.name, resource)


def _quantity(value: str) -> float:
    from kubernetes.utils import parse_quantity
    return float(parse_quantity(value))


def _ray_pods(e2e, env: str) -> list:
    return [p for p in workload_pods(e2e, env) if (p.metadata.labels or {}).get("ray.io/node-type") in
            ("head", "worker")]


def _main_container(pod):
    return next(c for c in pod.spec.containers if c.name.startswith("ray-") or c.name == "pytorch")


GPU_ENVS = envs_where(lambda doc: (doc.get("capabilities") or {}).get("gpu"))
# the environments whose checkpoints are a claim every pod mounts (store: volume); an object store (s3) has none
CHECKPOINT_ENVS = envs_where(lambda doc: ((doc.get("cluster") or {}).get("checkpoints") or {}).get("enabled")
                             and doc["cluster"]["checkpoints"].get("store", "volume") == "volume")


@pytest.mark.parametrize("env", GPU_ENVS)
def test_gpu_pods_carry_the_profile(e2e, bootstrapped, env):
    doc = e2e.env_doc(env)
    cluster = doc["cluster"]
    instance_type = doc["vars"]["gpuInstanceType"]
    wait_for(lambda: (len(_ray_pods(e2e, env)) > 0, "no Ray pods yet"), PODS_TIMEOUT, 5, "KubeRay made no eks pods")
    pods = _ray_pods(e2e, env) + [p for p in workload_pods(e2e, env)
                                   if (p.metadata.labels or {}).get("training.kubeflow.org/job-name")]
    problems = []
    for pod in pods:
        name = pod.metadata.name
        container = _main_container(pod)
        limits, requests = container.resources.limits or {}, container.resources.requests or {}
        if limits.get("nvidia.com/gpu") != "1" or requests.get("nvidia.com/gpu") != "1":
            problems.append(f"{name}: nvidia.com/gpu {requests.get('nvidia.com/gpu')}/{limits.get('nvidia.com/gpu')}")
        if cluster["efa"]["enabled"] and limits.get("vpc.amazonaws.com/efa") != "1":
            problems.append(f"{name}: no vpc.amazonaws.com/efa limit")
        env_vars = {e.name: e.value for e in container.env or []}
        if cluster["efa"]["enabled"] and env_vars.get("FI_PROVIDER") != "efa":
            problems.append(f"{name}: FI_PROVIDER={env_vars.get('FI_PROVIDER')}")
        if cluster["nccl"]["enabled"] and "NCCL_DEBUG" not in env_vars:
            problems.append(f"{name}: no NCCL_DEBUG")
        if cluster["efa"]["enabled"] and not (container.image or "").endswith("-efa"):
            problems.append(f"{name}: image {container.image} is not an EFA build")
        sc = pod.spec.security_context
        if not (sc and sc.fs_group_change_policy == "OnRootMismatch"):
            problems.append(f"{name}: fsGroupChangePolicy is not OnRootMismatch (FSx would be re-owned at every mount)")
        limits_gpu = (container.resources.limits or {}).get("nvidia.com/gpu")
        if limits_gpu and "ray.io/node-type" in (pod.metadata.labels or {}):
            command = " ".join((container.command or []) + (container.args or []))
            if f"--num-gpus={limits_gpu}" not in command.replace(" --num-gpus ", " --num-gpus="):
                problems.append(f"{name}: KubeRay did not derive num-gpus {limits_gpu} into `ray start`: {command[:200]}")
        mounts = {m.mount_path: m.name for m in container.volume_mounts or []}
        volumes = {v.name: v for v in pod.spec.volumes or []}
        shm = volumes.get(mounts.get("/dev/shm", ""))
        if not (shm and shm.empty_dir and shm.empty_dir.medium == "Memory"
                and shm.empty_dir.size_limit == cluster["shm"]["sizeLimit"]):
            problems.append(f"{name}: /dev/shm is not a {cluster['shm']['sizeLimit']} memory emptyDir")
        checkpoints = volumes.get(mounts.get(cluster["checkpoints"]["mountPath"], ""))
        if not (checkpoints and checkpoints.persistent_volume_claim
                and checkpoints.persistent_volume_claim.claim_name == cluster["checkpoints"]["claimName"]):
            problems.append(f"{name}: {cluster['checkpoints']['mountPath']} is not claim "
                            f"{cluster['checkpoints']['claimName']}")
        if (pod.spec.node_selector or {}).get("node.kubernetes.io/instance-type") != instance_type:
            problems.append(f"{name}: node selector {pod.spec.node_selector}")
        if pod.spec.node_name:
            node = e2e.core(env).read_node(pod.spec.node_name)
            if node.metadata.labels.get("node.kubernetes.io/instance-type") != instance_type:
                problems.append(f"{name}: runs on {pod.spec.node_name}, not a {instance_type}")
    assert pods and not problems, "\n".join(problems)


@pytest.mark.parametrize("env", CHECKPOINT_ENVS)
def test_checkpoint_claim_is_bound(e2e, bootstrapped, env):
    """The claim every Ray pod mounts binds (through the CSI provisioner stand-in)."""
    claim = e2e.env_doc(env)["cluster"]["checkpoints"]["claimName"]

    def check():
        pvc = e2e.core(env).read_namespaced_persistent_volume_claim(claim, e2e.namespace(env))
        return pvc.status.phase == "Bound", pvc.status.phase
    wait_for(check, 180, 3, f"claim {claim} did not bind")


@pytest.mark.parametrize("env", ENVS)
def test_ray_head_services_select_their_head_pod(e2e, bootstrapped, env):
    """Every Service KubeRay made for a Ray head (the cluster's <cluster>-head-svc and a RayJob's <job>-head-svc)
    selects the head pod: no template label overrides KubeRay's own (app.kubernetes.io/name=kuberay)."""
    def check():
        problems, services = [], 0
        for svc in e2e.core(env).list_namespaced_service(e2e.namespace(env)).items:
            if not svc.metadata.name.endswith("-head-svc"):
                continue
            services += 1
            selector = ",".join(f"{k}={v}" for k, v in (svc.spec.selector or {}).items())
            if not [p for p in e2e.pods(env, selector) if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]:
                problems.append(f"Service {svc.metadata.name} selects no head pod ({selector})")
        return services > 0 and not problems, "; ".join(problems) or f"{services} head services"
    wait_for(check, PODS_TIMEOUT, 5, f"the {env} Ray head services")


def _pod(name: str, container_security: dict | None, pod_security: dict | None) -> dict:
    resources = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}
    spec = {"containers": [{"name": "c", "image": "localhost/ray-training:0.1.0-cpu", "resources": resources,
                            **({"securityContext": container_security} if container_security is not None else {})}]}
    if pod_security is not None:
        spec["securityContext"] = pod_security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _admitted(e2e, env: str, body: dict) -> tuple[bool, str]:
    """Create the pod as a dry run (admission runs, nothing is stored): (admitted, the API server's message)."""
    from kubernetes.client.exceptions import ApiException
    try:
        e2e.core(env).create_namespaced_pod(e2e.namespace(env), body, dry_run="All")
        return True, ""
    except ApiException as exc:
        try:
            return False, json.loads(exc.body)["message"]
        except (TypeError, ValueError, KeyError):
            return False, exc.body or str(exc)


@pytest.mark.parametrize("env", ENVS)
def test_pod_security_admission_is_enforced_and_admits_every_operator_pod(e2e, bootstrapped, env):
    """The namespace carries the environment's pod-security.kubernetes.io labels; the real API server's PodSecurity
    admission rejects a pod below the enforced level (with its message) and admits one that meets it; and every pod
    the operators made was admitted (no FailedCreate for PodSecurity, from KubeRay, the Job controller or the
    training-operator)."""
    platform = (e2e.env_doc(env).get("platform") or {}).get("values") or {}
    level = (platform.get("podSecurity") or {}).get("enforce", "restricted")
    def namespace_labels():
        from kubernetes.client.exceptions import ApiException
        try:
            labels = e2e.core(env).read_namespace(e2e.namespace(env)).metadata.labels or {}
        except ApiException as exc:
            return False, f"namespace {e2e.namespace(env)}: {exc.reason}"
        return labels.get("pod-security.kubernetes.io/enforce") == level, labels
    labels = wait_for(namespace_labels, PODS_TIMEOUT, 3, f"{env}: the platform app did not label the namespace")
    assert labels.get("pod-security.kubernetes.io/warn") == labels.get("pod-security.kubernetes.io/audit") == \
        "restricted", labels
    # below baseline (a capability beyond baseline's list) is rejected everywhere, by PodSecurity at the enforced
    # level; below restricted only where restricted is enforced. (A privileged container is refused before
    # PodSecurity, by kube-apiserver's --allow-privileged=false.)
    ok, message = _admitted(e2e, env, _pod("e2e-psa-net-admin", {**RESTRICTED_CONTAINER, "capabilities": {
        "drop": ["ALL"], "add": ["NET_ADMIN"]}}, RESTRICTED_POD))
    assert not ok and f'violates PodSecurity "{level}:v1.' in message and "NET_ADMIN" in message, message
    ok, message = _admitted(e2e, env, _pod("e2e-psa-no-context", None, None))
    if level == "restricted":
        assert not ok and 'violates PodSecurity "restricted:' in message, message
        assert "allowPrivilegeEscalation" in message and "seccompProfile" in message, message
    else:
        assert ok, message
    ok, message = _admitted(e2e, env, _pod("e2e-psa-restricted", RESTRICTED_CONTAINER, RESTRICTED_POD))
    assert ok, message
    _placed(e2e, env)
    refused = [f"{ev.involved_object.kind}/{ev.involved_object.name}: {ev.message}" for ev in e2e.events(env)
               if "PodSecurity" in (ev.message or "")]
    assert refused == [], refused


@pytest.mark.parametrize("env", ENVS)
def test_each_ray_cluster_network_policy_selects_exactly_its_pods(e2e, bootstrapped, env):
    """The API server accepted one NetworkPolicy per Ray cluster; each selects exactly the pods KubeRay made for its
    cluster (by KubeRay's own ray.io/cluster label) and, for a RayJob, its submitter; every Ray pod is selected.
    (kwok has no network plugin: what the e2e shows is the objects and their selection, not packets dropped.)"""
    from kubernetes import client
    _placed(e2e, env)
    ns = e2e.namespace(env)
    policies = {p.metadata.name: p for p in
                client.NetworkingV1Api(e2e.core(env).api_client).list_namespaced_network_policy(ns).items}
    expected: dict[str, set[str]] = {}
    for cluster in e2e.objects(env, RAY, "rayclusters"):
        if (cluster["metadata"].get("labels") or {}).get("ray.io/originated-from-crd") == "RayJob":
            continue  # a job's cluster: under its RayJob below
        expected[f"{cluster['metadata']['name']}-ingress"] = {
            p.metadata.name for p in e2e.pods(env, f"ray.io/cluster={cluster['metadata']['name']}")}
    for job in e2e.objects(env, RAY, "rayjobs"):
        name, cluster = job["metadata"]["name"], (job.get("status") or {}).get("rayClusterName")
        pods = {p.metadata.name for p in e2e.pods(env, f"batch.kubernetes.io/job-name={name}")}
        if cluster:
            pods |= {p.metadata.name for p in e2e.pods(env, f"ray.io/cluster={cluster}")}
        expected[f"{name}-ingress"] = pods
    assert set(expected) <= set(policies), (sorted(expected), sorted(policies))
    for name, pods in expected.items():
        labels = policies[name].spec.pod_selector.match_labels or {}
        selected = {p.metadata.name for p in e2e.pods(env, ",".join(f"{k}={v}" for k, v in sorted(labels.items())))}
        assert pods and selected == pods, (name, sorted(selected), sorted(pods))
    ray_pods = {p.metadata.name for p in e2e.pods(env, "ray.io/node-type")}
    assert ray_pods <= set().union(*expected.values()), sorted(ray_pods - set().union(*expected.values()))


@pytest.mark.parametrize("env", ENVS)
def test_every_operator_made_container_has_a_read_only_root_with_scratch(e2e, bootstrapped, env):
    """Every container of every pod the operators made (Ray containers, KubeRay's wait-gcs-ready init container and
    autoscaler sidecar, the submitters, torchrun masters and workers, and the training-operator's init-pytorch,
    built from our template that Argo CD's kustomize patch hands the operator) runs with a read-only root, and each
    has a writable /tmp: our readonly-root-scratch rule, run on the live pods instead of our templates."""
    from validation import EnvFacts, check_documents
    from validation.manifests import Manifest

    pods = _placed(e2e, env)
    serialize = e2e.core(env).api_client.sanitize_for_serialization
    docs = [{"apiVersion": "v1", "kind": "Pod", **serialize(p)} for p in pods]
    writable = [f"{d['metadata']['name']}/{c['name']}" for d in docs
                for c in (d["spec"].get("initContainers") or []) + d["spec"]["containers"]
                if not (c.get("securityContext") or {}).get("readOnlyRootFilesystem")]
    assert writable == [], writable
    facts = EnvFacts(env, "1.34.0", gpu_nodes=True, dashboard_exposure_allowed=False, efa_nodes=None)  # unused
    found = check_documents([Manifest(Path(d["metadata"]["name"]), doc=d) for d in docs], facts,
                            ["readonly-root-scratch"])
    assert found == [], [str(v) for v in found]
    init_pytorch = [c for d in docs for c in d["spec"].get("initContainers") or [] if c["name"] == "init-pytorch"]
    if any(doc["kind"] == "PyTorchJob" and (doc["spec"]["pytorchReplicaSpecs"].get("Worker") or {}).get("replicas")
           for app in e2e.app_names(env) for doc in e2e.rendered(env, app)):
        assert init_pytorch, f"{env}: no PyTorchJob worker carries the training-operator's init container"
    for c in init_pytorch:
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, c  # ours, not the operator's built-in


AUTOSCALING_ENVS = envs_where(lambda doc: ((doc.get("cluster") or {}).get("autoscaler") or {}).get("enabled"))


@pytest.mark.parametrize("env", AUTOSCALING_ENVS)
def test_only_the_autoscaler_container_holds_a_service_account_token(e2e, bootstrapped, env):
    """On the head pod KubeRay made for an autoscaling cluster, no container but the autoscaler sidecar mounts the
    service-account token (a job submitted to the Ray cluster cannot patch its pods or RayClusters), and the pod
    mounts none of its own."""
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    name = e2e.env_doc(env)["rayCluster"]["name"]
    heads = wait_for(lambda: (bool(e2e.pods(env, f"ray.io/cluster={name},ray.io/node-type=head")),
                              e2e.pods(env, f"ray.io/cluster={name},ray.io/node-type=head")),
                     PODS_TIMEOUT, 5, f"no head pod of {name}")
    for pod in heads:
        assert pod.spec.automount_service_account_token is False, pod.metadata.name
        holders = sorted(c.name for c in [*(pod.spec.init_containers or []), *pod.spec.containers]
                         if any(m.mount_path == sa_dir for m in c.volume_mounts or []))
        assert holders == ["autoscaler"], (pod.metadata.name, holders)
