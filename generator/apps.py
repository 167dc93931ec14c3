"""Apps of an environment: what to render, with which chart, release name, namespace and values.

  platform          namespace, quota, checkpoint storage: values = platform.values    (if platform.enabled)
  ray-cluster       the standing RayCluster: values = cluster < rayCluster.values     (if rayCluster.enabled)
  job-<name>        one per entry of `jobs`: entry = jobDefaults < jobs.<name>; chart by `backend`
                    (ray: ray-job, torchrun: pytorch-job) unless `chart` names one;
                    values = (cluster < entry.cluster) + {job: entry.job}
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import access, charts, placement, queueing, schema_check
from .environments import Environment
from .errors import RenderError, RenderErrors, ValueFault
from .layers import Layer, merge
from .scopes import PLATFORM_APP

CLUSTER_APP = "ray-cluster"
JOB_PREFIX = "job-"
# A RayJob is immutable once running (KubeRay ignores later spec changes), so a changed job must be a new
# run: its release is rendered under this token, which is then replaced by a hash of everything rendered
# for it (so any change, in values or in the chart, gives a new name; Argo CD prunes the old RayJob).
HASH_TOKEN = "hhhhhhhh"
# A job runs on Ray (a RayJob) or under torchrun (a Kubeflow PyTorchJob); `chart` may name another chart.
BACKEND_CHARTS = {"ray": "ray-job", "torchrun": "pytorch-job"}


@dataclass
class App:
    env: str
    name: str            # directory under apps/<env>/
    release: str         # helm release name (the resource name)
    chart: charts.Chart
    namespace: str
    values: Layer        # chart values with provenance
    hashed: bool = False  # release name carries HASH_TOKEN, replaced by a hash of the rendered output
    # kinds rendered (so the run's hash is the one every cluster computes) but not written: on a MultiKueue worker,
    # the job itself, which the manager holds and MultiKueue copies (generator/placement.py)
    leaves_out: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.env}/{self.name}"


def compose(root: Path, env: Environment) -> list[App]:
    layer = env.layer
    cluster = layer.sub("cluster")
    apps, errors = [], []

    def add(name, release, chart_name, chart_path, values: Layer, hashed=False, leaves_out=()):
        try:
            chart = charts.find(root, chart_name, layer.locate(chart_path) if chart_path else None)
        except RenderError as exc:
            errors.append(exc)
            return
        what = f"values of chart {chart.name!r} (app {name!r})"
        errors.extend(schema_check.check(values, schema_check.load_schema(chart.schema_path), what,
                                         skip_required=True, app=name, chart=chart.name))
        apps.append(App(env.name, name, release, chart, env.namespace, values, hashed, tuple(leaves_out)))

    rc = layer.get("rayCluster", default={}) or {}
    standing = None  # the standing RayCluster: its release name and values
    if rc.get("enabled", True) and env.placement.role != placement.MANAGER:  # the manager runs no training
        standing = (rc.get("name", "ray"),
                    merge(cluster, layer.sub("rayCluster", "values") if "values" in rc else Layer({}, {})))

    platform = layer.get("platform", default={}) or {}
    if platform.get("enabled", True):
        values = layer.sub("platform", "values") if "values" in platform else Layer({}, {})
        people = access.platform_values(env, (standing[0], standing[1].data) if standing else None)
        if people:  # the groups of environments' `access`: the namespace's RoleBindings (charts/platform)
            values = merge(Layer({"access": people}, {}), values)
        queues = queueing.platform_values(env)
        if queues:  # the environment's `queueing`: ResourceFlavors, ClusterQueue, LocalQueue (charts/platform)
            values = merge(queues, values)
        if env.placement.role == placement.MANAGER:  # runs no training: no checkpoint storage of its own
            values = merge(values, Layer({"checkpoints": {"mode": "static"}}, {}))
        add(PLATFORM_APP, "platform", platform.get("chart", "platform"),
            ("platform", "chart") if "chart" in platform else None, values)

    if standing:
        chart_path = ("rayCluster", "chart") if "chart" in rc else None
        add(CLUSTER_APP, standing[0], rc.get("chart", "ray-cluster"), chart_path, standing[1])

    defaults = layer.sub("jobDefaults") if layer.get("jobDefaults") else Layer({}, {})
    for job_name in sorted(layer.get("jobs", default={}) or {}):
        entry = merge(defaults, layer.sub("jobs", job_name))
        if not entry.data.get("enabled", True) or not placement.job_runs_on(env, entry.data):
            continue
        chart_path = ("jobs", job_name, "chart") if "chart" in (layer.get("jobs", job_name) or {}) else (
            ("jobDefaults", "chart") if "chart" in (layer.get("jobDefaults") or {}) else None)
        values = merge(cluster, entry.sub("cluster") if "cluster" in entry.data else Layer({}, {}))
        backend = entry.data.get("backend", "ray")
        dispatched = placement.dispatched(env, entry.data)
        problem = placement.checkpoint_problem(job_name, values.data.get("checkpoints") or {}) if dispatched else None
        if problem:  # located where the job's checkpoints were set (the environment's, its defaults' or its own)
            where = values.locate(("checkpoints",)) or layer.locate(("jobs", job_name))
            errors.append(RenderError(f"{problem[0]} ({problem[1]})", where,
                                      ValueFault("checkpoints", problem[0], f" ({problem[1]})")))
            continue
        queue = queueing.job_values(env, entry.data.get("chart", BACKEND_CHARTS.get(backend, "")), dispatched)
        if queue:  # queued: the LocalQueue's label, Kueue owns suspend, the Ray cluster goes with the quota
            values = merge(values, Layer(queue, {}))
        if "job" in entry.data:
            values = merge(values, entry.sub("job").under("job"))
        problem = ray_job_name_problem(job_name) if backend == "ray" else None
        if problem:
            errors.append(RenderError(f"jobs.{job_name}: {problem}", layer.locate(("jobs", job_name)),
                                      ValueFault(f"jobs.{job_name}", problem)))
            continue
        add(JOB_PREFIX + job_name, f"{job_name}-{HASH_TOKEN}", entry.data.get("chart", BACKEND_CHARTS[backend]),
            chart_path, values, hashed=True,
            leaves_out=placement.JOB_KINDS if dispatched and env.placement.role == placement.WORKER else ())

    if errors:
        raise RenderErrors(_merge_same_fault(errors))
    return apps


# KubeRay v1.7.0 refuses a RayJob whose name is longer than 47 characters or not a DNS-1035 label (it names the
# job's RayCluster and Services after it: ray-operator/controllers/ray/utils/validation.go); a run is
# <job>-<8 hex>, so a Ray job's name has 38 characters at most and starts with a letter.
RAY_JOB_NAME_MAX = 47 - 9
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def ray_job_name_problem(name: str) -> str | None:
    """Why KubeRay would refuse this Ray job's runs (<name>-<hash>), or None."""
    if not _DNS_1035.match(name):
        return (f"{name!r} is not a Ray job name KubeRay accepts (expected: lowercase letters, digits and '-', "
                "starting with a letter: a DNS-1035 label)")
    if len(name) > RAY_JOB_NAME_MAX:
        return (f"{name!r} has {len(name)} characters; a Ray job's runs are named <job>-<8 hex> and KubeRay "
                f"refuses RayJob names over 47 (expected: at most {RAY_JOB_NAME_MAX} characters)")
    return None


def _merge_same_fault(errors: list[RenderError]) -> list[RenderError]:
    """One value that breaks several apps is one fault: report it once, naming every app."""
    merged: dict[tuple, list[RenderError]] = {}
    for err in errors:
        f = err.fault
        key = (err.location, f.field, f.problem, f.hint) if f is not None and f.apps else (id(err),)
        merged.setdefault(key, []).append(err)
    out = []
    for same in merged.values():
        f = same[0].fault
        if f is None or not f.apps:
            out.append(same[0])
            continue
        apps = tuple(pair for e in same for pair in e.fault.apps)
        names = ", ".join(f"{app} ({chart})" for app, chart in apps)
        what = f"the values of app{'s' if len(apps) > 1 else ''} {names}"
        out.append(RenderError(f.message(what), same[0].location, ValueFault(f.field, f.problem, f.hint, apps)))
    return out
