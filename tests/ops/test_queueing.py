"""make status and make diagnose on an environment that queues its jobs with Kueue (`queueing`): against the RayJob,
PyTorchJob, Workload and LocalQueue objects as the API server returns them (Kueue v0.17, kueue.x-k8s.io/v1beta2).
A job Kueue holds is `queued`, with its place in the ClusterQueue's line and Kueue's reason; diagnose names the
quota value and the var that sets it, at their file:line. A job without the queue label is reported as before."""
from __future__ import annotations

import dataclasses
import io
import json
import shutil
from contextlib import redirect_stdout
from types import SimpleNamespace as NS

import pytest

from generator import environments
from ops import cli, diagnose, kueue, status
from ops.targets import Target, target
from tests.support import REPO

NAMESPACE = "ray-training"
OVER_CAPACITY = ("couldn't assign flavors to pod set gpu-g5: insufficient quota for nvidia.com/gpu in flavor "
                 "g5-8xlarge, previously considered podsets requests (1) + current podset request (24) > maximum "
                 "capacity (16)")
IN_USE = ("couldn't assign flavors to pod set gpu-g5: insufficient unused quota for nvidia.com/gpu in flavor "
          "g5-8xlarge, 8 more needed")


class _NotFound(Exception):
    status = 404


class _Forbidden(Exception):
    status = 403


def rayjob(name, uid, created, suspend, deployment, queue="training"):
    labels = {"app.kubernetes.io/name": "ray-job"} | ({kueue.QUEUE_LABEL: queue} if queue else {})
    return {"metadata": {"name": name, "uid": uid, "creationTimestamp": created, "labels": labels},
            "spec": {"suspend": suspend, "entrypoint": "python -m training"},
            "status": {"jobDeploymentStatus": deployment}}


def pytorchjob(name, uid, created, suspend, queue=None):
    labels = {kueue.QUEUE_LABEL: queue} if queue else {}
    return {"metadata": {"name": name, "uid": uid, "creationTimestamp": created, "labels": labels},
            "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {}},
            "status": {"conditions": [{"type": "Created", "status": "True"}]
                       + ([{"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended",
                            "message": f"PyTorchJob {NAMESPACE}/{name} is suspended."}] if suspend else
                          [{"type": "Running", "status": "True"}])}}


def workload(name, owner_uid, created, queue="training", admitted=False, finished=False, message=OVER_CAPACITY):
    conditions = [{"type": "QuotaReserved", "status": "True" if admitted else "False",
                   "reason": "QuotaReserved" if admitted else "Pending",
                   "message": "Quota reserved in ClusterQueue eks" if admitted else message}]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted",
                           "message": "The workload is admitted"})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done"})
    out = {"metadata": {"name": name, "creationTimestamp": created,
                        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "uid": owner_uid}]},
           "spec": {"queueName": queue}, "status": {"conditions": conditions}}
    if admitted:
        out["status"]["admission"] = {"clusterQueue": "eks"}
    return out


def local_queue(name, cluster_queue):
    return {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"clusterQueue": cluster_queue}}


class Custom:
    """The custom objects API: objects by plural; a plural in `missing` has no CRD (404), in `forbidden` no RBAC."""

    def __init__(self, objects, missing=(), forbidden=()):
        self.objects, self.missing, self.forbidden = objects, set(missing), set(forbidden)
        self.listed = []

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=None):
        self.listed.append((group, version, plural))
        if plural in self.forbidden:
            raise _Forbidden()
        if plural in self.missing:
            raise _NotFound()
        return {"items": self.objects.get(plural, [])}

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        raise _NotFound()


class Core:
    def list_namespaced_pod(self, namespace, label_selector=None):
        return NS(items=[])

    def list_namespaced_service(self, namespace):
        return NS(items=[])

    def list_namespaced_event(self, namespace):
        return NS(items=[])

    def read_namespaced_persistent_volume_claim(self, name, namespace):
        return NS(status=NS(phase="Bound"))


def clients(custom):
    core = Core()
    return NS(core=lambda ctx: core, custom=lambda ctx: custom, kubeconfig=None)


def hand_target():
    return Target("eks", "eks", NAMESPACE, "eks", "argocd", None, {})


def queued_cluster(**kwargs) -> Custom:
    """Four jobs: queue-first admitted and running; queue-second and queue-third held by Kueue (queue-third after a
    workload of another LocalQueue of the same ClusterQueue); fsdp-llama not queued. Besides them: a finished
    workload and one of another ClusterQueue, older than all, which are in nobody's line."""
    return Custom({
        "rayjobs": [rayjob("queue-first-0a1b2c3d", "uid-first", "2026-03-02T09:50:00Z", False, "Running"),
                    rayjob("queue-second-1b2c3d4e", "uid-second", "2026-03-02T10:00:00Z", True, "Suspended"),
                    rayjob("queue-third-2c3d4e5f", "uid-third", "2026-03-02T10:05:00Z", True, "Suspended")],
        "pytorchjobs": [pytorchjob("fsdp-llama-d2b2238f", "uid-fsdp", "2026-03-02T09:00:00Z", False)],
        "workloads": [workload("rayjob-queue-first-0a1b2c3d-aaaaa", "uid-first", "2026-03-02T09:50:01Z",
                               admitted=True),
                      workload("rayjob-queue-second-1b2c3d4e-bbbbb", "uid-second", "2026-03-02T10:00:01Z"),
                      workload("rayjob-queue-third-2c3d4e5f-ccccc", "uid-third", "2026-03-02T10:05:01Z",
                               message=IN_USE),
                      workload("rayjob-team-b-job-3d4e5f6a-ddddd", "uid-team-b", "2026-03-02T10:02:00Z",
                               queue="team-b"),
                      workload("rayjob-elsewhere-4e5f6a7b-eeeee", "uid-elsewhere", "2026-03-02T08:00:00Z",
                               queue="other"),
                      workload("rayjob-old-5f6a7b8c-fffff", "uid-old", "2026-03-02T07:00:00Z", finished=True)],
        "localqueues": [local_queue("training", "eks"), local_queue("team-b", "eks"),
                        local_queue("other", "elsewhere")],
    }, **kwargs)


def by_job(result):
    return {j["job"]: j for j in result["jobs"]}


def rows(text: str, run: str) -> list[str]:
    """The table's row of `run` and the lines under it, up to the next run's row."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f" {run} " in line)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 16)), len(lines))
    return lines[start:end]


def test_status_shows_a_waiting_run_queued_with_its_place_and_kueues_reason():
    custom = queued_cluster()
    result = status.environment_status(clients(custom), hand_target())
    jobs = by_job(result)
    assert jobs["queue-second"]["status"] == "queued"
    assert jobs["queue-second"]["queue"] == {"localQueue": "training", "clusterQueue": "eks", "admitted": False,
                                             "position": 1, "message": OVER_CAPACITY}
    # behind queue-second and team-b's workload (another LocalQueue of the same ClusterQueue); the finished one and
    # the other ClusterQueue's are in nobody's line
    assert jobs["queue-third"]["queue"]["position"] == 3
    assert jobs["queue-third"]["queue"]["message"] == IN_USE
    assert jobs["queue-first"]["status"] == "running"
    assert jobs["queue-first"]["queue"] == {"localQueue": "training", "clusterQueue": "eks", "admitted": True,
                                            "position": None, "message": ""}
    assert [p for p in custom.listed if p[2] in ("workloads", "localqueues")] == \
        [("kueue.x-k8s.io", "v1beta2", "workloads"), ("kueue.x-k8s.io", "v1beta2", "localqueues")], \
        "Kueue's objects are read once per environment, not once per job"
    assert status.healthy(result), "a job waiting for quota is not a failed one"
    json.dumps(result)  # the --json shape


def test_the_table_says_queued_and_why_under_a_waiting_run_and_nothing_under_an_admitted_one():
    text = status.render_table(status.environment_status(clients(queued_cluster()), hand_target()))
    second = rows(text, "queue-second-1b2c3d4e")
    assert "queued (Suspended)" in second[0]
    assert second[1:] == [f"{'':<16} waiting for quota in LocalQueue training (position 1): {OVER_CAPACITY[:160]}"]
    assert "waiting for quota in LocalQueue training (position 3): " in rows(text, "queue-third-2c3d4e5f")[1]
    first = rows(text, "queue-first-0a1b2c3d")
    assert "queued" not in first[0] and "Running" in first[0]
    assert not any("waiting for quota" in line or "Kueue" in line for line in first), first
    assert not any("waiting for quota" in line for line in rows(text, "fsdp-llama-d2b2238f"))


def test_a_job_without_the_queue_label_is_reported_as_before():
    custom = Custom({"rayjobs": [rayjob("digits-torch-12e6cc06", "uid-d", "2026-03-02T09:00:00Z", False, "Running",
                                        queue=None),
                                 rayjob("cifar10-torch-79345f66", "uid-c", "2026-03-02T09:00:00Z", False, "Failed",
                                        queue=None)],
                     "pytorchjobs": [pytorchjob("fsdp-llama-d2b2238f", "uid-f", "2026-03-02T09:00:00Z", False)]},
                    missing={"workloads", "localqueues"})
    result = status.environment_status(clients(custom), hand_target())
    jobs = by_job(result)
    assert {j: (r["status"], r["queue"]) for j, r in jobs.items()} == {
        "digits-torch": ("running", None), "cifar10-torch": ("failed", None), "fsdp-llama": ("running", None)}
    assert not [p for p in custom.listed if p[0] == "kueue.x-k8s.io"], "no queued run: Kueue is not asked"
    assert "waiting for quota" not in status.render_table(result)
    assert not status.healthy(result)


def test_a_cluster_without_kueues_crds_has_no_workload_for_a_queued_run():
    custom = queued_cluster(missing={"workloads", "localqueues"})
    result = status.environment_status(clients(custom), hand_target())
    jobs = by_job(result)
    no_workload = {"localQueue": "training", "clusterQueue": None, "admitted": False, "position": None,
                   "message": "no Workload (is Kueue installed?)"}
    assert jobs["queue-second"]["queue"] == no_workload
    assert jobs["queue-second"]["status"] == "queued"  # suspended: still held
    assert jobs["queue-first"]["queue"] == no_workload
    assert jobs["queue-first"]["status"] == "running"  # not suspended: it runs, without Kueue
    assert jobs["fsdp-llama"]["queue"] is None
    text = status.render_table(result)
    assert rows(text, "queue-second-1b2c3d4e")[1].endswith(
        "waiting for quota in LocalQueue training: no Workload (is Kueue installed?)")
    assert rows(text, "queue-first-0a1b2c3d")[1].endswith(
        "not admitted by Kueue (LocalQueue training): no Workload (is Kueue installed?)")


def test_an_error_other_than_no_crd_is_not_taken_for_no_kueue():
    with pytest.raises(_Forbidden):
        status.environment_status(clients(queued_cluster(forbidden={"workloads"})), hand_target())


def test_a_queued_pytorchjob_is_held_by_its_run_policy():
    custom = Custom({"pytorchjobs": [pytorchjob("fsdp-llama-d2b2238f", "uid-f", "2026-03-02T09:00:00Z", True,
                                                queue="training")],
                     "workloads": [workload("pytorchjob-fsdp-llama-d2b2238f-aaaaa", "uid-f",
                                            "2026-03-02T09:00:01Z", message=IN_USE)],
                     "localqueues": [local_queue("training", "eks")]})
    record = by_job(status.environment_status(clients(custom), hand_target()))["fsdp-llama"]
    assert (record["status"], record["state"], record["queue"]["position"]) == ("queued", "Suspended", 1)


# ---- make diagnose -------------------------------------------------------------------------------------------

GPU_ENV = """\
description: a GPU environment whose jobs Kueue queues
vars:
  gpuQuota: 16
target:
  namespace: ray-training
queueing:
  enabled: true
  flavors:
    - name: m5-2xlarge
      quota: {cpu: "8", memory: 16Gi}
    - name: g5-8xlarge
      quota:
        nvidia.com/gpu: "{{ vars.gpuQuota }}"
        cpu: "{{ vars.gpuQuota * 28 }}"
"""

FLEET = """\
    clusters:
      gpu:
        target: {server: "https://gpu.example.internal", publicCertificate: true}
        vars:
          gpuQuota: 8
      west:
        target: {server: "https://west.example.internal", publicCertificate: true}
"""


def line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def gpu_repo(tmp_path):
    """A checkout with environments/base.yaml and environments/gpu.yaml (single cluster)."""
    (tmp_path / "environments").mkdir()
    shutil.copy(REPO / "environments" / "base.yaml", tmp_path / "environments" / "base.yaml")
    (tmp_path / "environments" / "gpu.yaml").write_text(GPU_ENV)
    return tmp_path


def waiting_cluster(message=OVER_CAPACITY, **kwargs) -> Custom:
    return Custom({"rayjobs": [rayjob("queue-second-1b2c3d4e", "uid-second", "2026-03-02T10:00:00Z", True,
                                      "Suspended")],
                   "workloads": [workload("rayjob-queue-second-1b2c3d4e-bbbbb", "uid-second",
                                          "2026-03-02T10:00:01Z", message=message)],
                   "localqueues": [local_queue("training", "gpu")]}, **kwargs)


def test_diagnose_names_the_quota_value_and_the_var_with_file_and_line(gpu_repo):
    env_file = gpu_repo / "environments" / "gpu.yaml"
    result = diagnose.diagnose(clients(waiting_cluster()), target(gpu_repo, "gpu"), "queue-second")
    assert [f.failure.name for f in result.findings] == ["not-admitted-quota"]
    finding = result.findings[0]
    assert (finding.source, finding.evidence) == ("Workload rayjob-queue-second-1b2c3d4e-bbbbb", OVER_CAPACITY)
    assert not result.retryable and result.known
    quota_line, var_line = line_of(env_file, "nvidia.com/gpu:"), line_of(env_file, "gpuQuota: 16")
    assert f'environments/gpu.yaml:{quota_line} queueing.flavors[1].quota.nvidia.com/gpu = ' \
           f'"{{{{ vars.gpuQuota }}}}" (16 on gpu)' in finding.fix
    assert f"vars.gpuQuota is set at environments/gpu.yaml:{var_line}" in finding.fix
    assert "wait for running jobs to end: Kueue admits it then" in finding.fix
    text = diagnose.render(result)
    assert "- not admitted: no quota in the ClusterQueue [not-admitted-quota; needs a change]" in text
    assert f"    evidence (Workload rayjob-queue-second-1b2c3d4e-bbbbb): {OVER_CAPACITY}" in text
    assert f"    fix: {finding.fix}" in text


def test_diagnose_names_a_clusters_own_var_where_it_wins(gpu_repo):
    env_file = gpu_repo / "environments" / "gpu.yaml"
    env_file.write_text(GPU_ENV + "\n".join(line[4:] for line in FLEET.splitlines()) + "\n")
    tgt = target(gpu_repo, "gpu")
    assert tgt.cluster == "gpu"
    fix = diagnose.diagnose(clients(waiting_cluster(IN_USE)), tgt, "queue-second").findings[0].fix
    own = line_of(env_file, "gpuQuota: 8")
    assert '= "{{ vars.gpuQuota }}" (8 on cluster gpu)' in fix
    assert f"vars.gpuQuota is set at environments/gpu.yaml:{own} clusters.gpu.vars.gpuQuota" in fix
    # the other cluster has none of its own: the environment's, and where its own would go
    members = {m.cluster: m for m in environments.members(environments.load(gpu_repo, "gpu"))}
    west = dataclasses.replace(tgt, cluster="west", doc=members["west"].doc, layer=members["west"].layer)
    fix = diagnose.quota_fix(west, IN_USE)
    assert '= "{{ vars.gpuQuota }}" (16 on cluster west)' in fix
    assert f"vars.gpuQuota is set at environments/gpu.yaml:{line_of(env_file, 'gpuQuota: 16')} (" in fix
    assert "clusters.west.vars.gpuQuota would set it for cluster west alone" in fix


def test_diagnose_json_carries_the_environments_fix(gpu_repo, monkeypatch):
    monkeypatch.setattr(cli, "Clients", lambda kubeconfig: clients(waiting_cluster()))
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["--repo", str(gpu_repo), "diagnose", "--env", "gpu", "--job", "queue-second", "--json"])
    report = json.loads(out.getvalue())
    assert code == 0 and report["known"] and not report["retryable"]
    [finding] = report["findings"]
    assert finding["class"] == "not-admitted-quota" and finding["evidence"] == OVER_CAPACITY
    assert "environments/gpu.yaml:" in finding["fix"] and "vars.gpuQuota" in finding["fix"]
    assert "nvidia.com/gpu" in finding["fix"]


def test_a_quota_the_environment_does_not_write_is_said_so(gpu_repo):
    tgt = target(gpu_repo, "gpu")
    fix = diagnose.quota_fix(tgt, "couldn't assign flavors to pod set head: insufficient quota for nvidia.com/gpu in "
                                  "flavor m5-2xlarge, previously considered podsets requests (0) + current podset "
                                  "request (1) > maximum capacity (0), insufficient quota for cpu in flavor "
                                  "t3-large, previously considered podsets requests (0) + current podset request "
                                  "(1) > maximum capacity (0)")
    assert "queueing.flavors[0] (m5-2xlarge) gives no nvidia.com/gpu (quota 0)" in fix
    assert "flavor t3-large is not in gpu's queueing.flavors" in fix
    assert "more quota" not in fix
    assert diagnose.quota_fix(tgt, "couldn't assign flavors to pod set head: flavor m5-2xlarge doesn't match "
                                   "node affinity") is None


def test_a_waiting_run_without_kueue_is_not_a_quota_finding(gpu_repo):
    result = diagnose.diagnose(clients(waiting_cluster(missing={"workloads", "localqueues"})),
                               target(gpu_repo, "gpu"), "queue-second")
    assert not result.findings
    assert "LocalQueue training: RayJob queue-second-1b2c3d4e is suspended in LocalQueue training with no Workload " \
           "(is Kueue installed?)" in result.last_lines


@pytest.mark.parametrize("admitted", [True, False])
def test_the_workload_is_evidence_only_while_it_holds_a_suspended_run(gpu_repo, admitted):
    """An admitted run, or a failed one, has nothing from its Workload (Kueue's message is about the wait)."""
    custom = waiting_cluster()
    run = custom.objects["rayjobs"][0]
    if admitted:
        run["spec"]["suspend"] = False
        run["status"]["jobDeploymentStatus"] = "Running"
        custom.objects["workloads"][0] = workload("rayjob-queue-second-1b2c3d4e-bbbbb", "uid-second",
                                                  "2026-03-02T10:00:01Z", admitted=True)
    else:
        run["status"] = {"jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "exit code 1"}
    result = diagnose.diagnose(clients(custom), target(gpu_repo, "gpu"), "queue-second")
    assert "not-admitted-quota" not in {f.failure.name for f in result.findings}
    assert not any("quota" in line for line in result.last_lines), result.last_lines
