"""Connecting to Ray, describing the cluster, and checking a request fits before any placement group is made.

* ``RAY_ADDRESS`` set (a KubeRay RayJob sets it for its entrypoint): join that cluster.
* Otherwise: start a local Ray on this machine, with the dashboard (``ray[default]``): Ray Train's placement-group
  cleaner and Tune need its state API. Set ``TRAINING_RAY_DASHBOARD=0`` to skip it (faster start, noisier logs).
* Ray already initialized in this process (tests share one session): reuse it and leave it running.
"""

from __future__ import annotations

import os
import time
from typing import Any

from training.errors import ClusterConnectError, ResourceError
from training.job.parts import Workers

#: Ray's own resource names for what the spec calls cpu / gpu.
CPU, GPU = "CPU", "GPU"


def export_import_path() -> None:
    """A local Ray's workers inherit the driver's environment: put this package's parent folder and the current
    folder on their PYTHONPATH so they import ``training`` (and ``package.module`` trainers) from the same checkout.
    On a cluster the package is installed in the image instead."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for extra in (os.getcwd(), root):
        if extra not in paths:
            paths.insert(0, extra)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def join_error(address: str, exc: BaseException) -> ClusterConnectError:
    """Why joining the cluster failed, with the way out when Ray says it is authentication (by its exception
    type: ``ray.exceptions.AuthenticationError``, raised or the cause of what was)."""
    import ray.exceptions

    chain, err = [], exc
    while err is not None and err not in chain:
        chain.append(err)
        err = err.__cause__ or err.__context__
    cause = exc.__cause__ or exc
    hint = ""
    if any(isinstance(e, ray.exceptions.AuthenticationError) for e in chain):
        cause = next(e for e in chain if isinstance(e, ray.exceptions.AuthenticationError))
        hint = (" The cluster uses token authentication: set RAY_AUTH_MODE=token and provide its token "
                "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token); an explicit RAY_ADDRESS "
                "never enables token auth by itself.")
    text = str(cause)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    first = next((ln for ln in lines if "Error:" in ln and not ln.startswith("Traceback")),
                 lines[0] if lines else "")[:300]
    return ClusterConnectError(
        f"cannot join the Ray cluster at RAY_ADDRESS={address}: {type(cause).__name__}: {first}.{hint}",
        details=text[-2000:])


class RaySession:
    """Context manager: connect (or start), and on exit shut down only what this object started."""

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, quiet: bool = True):
        self.address = address if address is not None else os.environ.get("RAY_ADDRESS") or None
        self.num_cpus = num_cpus
        self.quiet = quiet
        self.started = False
        self.init_seconds = 0.0
        self.kind = ""

    def __enter__(self) -> RaySession:
        import ray

        t0 = time.time()
        if ray.is_initialized():
            self.kind = "existing"
        elif self.address:
            try:
                ray.init(address=self.address, log_to_driver=True, logging_level="WARNING" if self.quiet else "INFO")
            except (ConnectionError, RuntimeError, ray.exceptions.AuthenticationError) as exc:
                raise join_error(self.address, exc) from None
            self.started = True
            self.kind = f"joined {self.address}"
        else:
            export_import_path()
            dashboard = os.environ.get("TRAINING_RAY_DASHBOARD", "1") not in ("0", "false", "no")
            ray.init(
                address="local",
                num_cpus=self.num_cpus,
                include_dashboard=dashboard,
                log_to_driver=True,
                logging_level="WARNING" if self.quiet else "INFO",
            )
            self.started = True
            self.kind = "local"
        self.init_seconds = time.time() - t0
        return self

    def __exit__(self, *exc) -> None:
        import ray

        if self.started and ray.is_initialized():
            ray.shutdown()


def cluster_status(detail: bool = False) -> dict[str, Any]:
    """The result's ``clusterStatus`` (numNodes, totalCpu, totalGpu); with ``detail``, per-node resources too."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    status: dict[str, Any] = {
        "numNodes": len(nodes),
        "totalCpu": float(total.get(CPU, 0.0)),
        "totalGpu": float(total.get(GPU, 0.0)),
    }
    if detail:
        avail = ray.available_resources()
        status["availableCpu"] = float(avail.get(CPU, 0.0))
        status["availableGpu"] = float(avail.get(GPU, 0.0))
        status["nodes"] = [
            {
                "nodeId": n.get("NodeID"),
                "address": n.get("NodeManagerAddress"),
                "head": "node:__internal_head__" in (n.get("Resources") or {}),
                "cpu": float((n.get("Resources") or {}).get(CPU, 0.0)),
                "gpu": float((n.get("Resources") or {}).get(GPU, 0.0)),
                "memoryGiB": round(float((n.get("Resources") or {}).get("memory", 0.0)) / 2**30, 2),
            }
            for n in nodes
        ]
    return status


def node_totals() -> list[dict[str, float]]:
    """Each live node's total resources (Ray's resource names)."""
    import ray

    return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]


def fits(per_node: list[dict[str, float]], bundle: dict[str, float], count: int) -> int:
    """How many of ``count`` identical bundles a first-fit placement can put on these nodes."""
    free = [dict(n) for n in per_node]
    placed = 0
    for _ in range(count):
        for node in free:
            if all(node.get(k, 0.0) + 1e-9 >= v for k, v in bundle.items()):
                for k, v in bundle.items():
                    node[k] = node.get(k, 0.0) - v
                placed += 1
                break
    return placed


def describe(per_node: list[dict[str, float]]) -> str:
    parts = [f"node {i}: {n.get(CPU, 0):g} CPU, {n.get(GPU, 0):g} GPU" for i, n in enumerate(per_node)]
    return "; ".join(parts) or "no nodes"


def worker_bundle(workers: Workers) -> dict[str, float]:
    bundle = {CPU: float(workers.cpu)}
    if workers.gpu:
        bundle[GPU] = float(workers.gpu)
    return bundle


def room_now(bundle: dict[str, float], count: int, strategy: str, wait_seconds: float) -> bool:
    """Whether ``count`` bundles can be placed (with the run's strategy) within ``wait_seconds``: asked of Ray itself
    with a placement group, removed again at once, so the run's own request then finds the room."""
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy)
    try:
        return bool(group.wait(timeout_seconds=max(wait_seconds, 0.001)))
    finally:
        remove_placement_group(group)


def check_resources(workers: Workers, *, wait_seconds: float | None = None) -> None:
    """Fail fast (``ResourceError``) unless the run's workers fit the cluster (the minimum of an elastic run).

    Beyond the cluster's totals: fail at once, listing what the nodes have. Within the totals but not free right
    now (another job, or the placement group of a run that just ended): wait up to ``config.resourceWaitSeconds``
    for it to be freed, then fail saying what is free. Ray Train itself would wait forever.
    """
    import ray

    n = workers.needed
    bundle = worker_bundle(workers)
    want = ", ".join(f"{v:g} {k}" for k, v in bundle.items())
    totals = node_totals()
    if fits(totals, bundle, n) < n:
        sums = {k: sum(node.get(k, 0.0) for node in totals) for k in (CPU, GPU)}
        raise ResourceError(
            f"the job asks for {n} worker(s) x ({want}) but the cluster can place at most "
            f"{fits(totals, bundle, n)}: it has {len(totals)} node(s) with {sums[CPU]:g} CPU and {sums[GPU]:g} GPU in all "
            f"({describe(totals)}). Lower config.numWorkers / config.resourcesPerWorker"
            + (" or set config.useGpu: false" if bundle.get(GPU) and sums[GPU] == 0 else "")
            + ".",
            field="config.numWorkers" if fits(totals, bundle, 1) >= 1 else "config.resourcesPerWorker",
        )
    wait_seconds = workers.resource_wait_s if wait_seconds is None else wait_seconds
    if room_now(bundle, n, workers.placement_strategy, wait_seconds):
        return
    free = ray.available_resources()
    raise ResourceError(
        f"the job asks for {n} worker(s) x ({want}); the cluster has room for it in total ({describe(totals)}) but "
        f"Ray could not place it within {wait_seconds:g} s (free now: {free.get(CPU, 0.0):g} CPU, "
        f"{free.get(GPU, 0.0):g} GPU). Other work holds the rest; retry later or raise config.resourceWaitSeconds.",
        field="config.numWorkers",
    )
