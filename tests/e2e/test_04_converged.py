"""Stays converged: after the first sync every Application stays Synced across several reconciles with no new sync
operations (no perpetual OutOfSync from CRD defaults, no self-heal loop); an autoscaler-style change of a worker
group's `replicas` on the live RayCluster is neither reverted nor shown as drift; a git change to any other
worker-group field does reach the live object."""
from __future__ import annotations

import json
import time

import pytest

from e2e import argo, nodes
from tests.e2e.harness import RAY, envs_where, wait_for

ENVS = nodes.environments()
RECONCILES = 3


def _sync_count(app: dict) -> int:
    return len((app.get("status") or {}).get("history") or [])


def _reconciled_at(app: dict) -> str:
    return (app.get("status") or {}).get("reconciledAt", "")


@pytest.fixture(scope="module")
def converged(e2e, bootstrapped):
    for env in ENVS:
        e2e.wait_synced_healthy(env, 420, names={f"{env}-{app}" for app in ("platform", "ray-cluster")})
    return True


def _standing_cluster(e2e, env) -> dict:
    clusters = e2e.objects(env, RAY, "rayclusters")
    name = e2e.env_doc(env)["rayCluster"]["name"]
    return next(c for c in clusters if c["metadata"]["name"] == name)


AUTOSCALED = envs_where(lambda doc: doc["rayCluster"].get("enabled", True)
                        and ((doc.get("cluster") or {}).get("autoscaler") or {}).get("enabled"))


@pytest.fixture(scope="module")
def watched(e2e, converged):
    """One watch of every environment for RECONCILES reconciles, with what the Ray autoscaler does happening in it:
    on each autoscaled standing cluster, PATCH workerGroupSpecs[0].replicas up by one. {env: problems},
    {env: autoscaler problems}."""
    targets = {}
    for env in AUTOSCALED:
        cluster = _standing_cluster(e2e, env)
        group = cluster["spec"]["workerGroupSpecs"][0]
        target = min(group.get("replicas", 0) + 1, group.get("maxReplicas", 1))
        assert target != group.get("replicas"), f"{env}: maxReplicas leaves no room to scale"
        e2e.kubectl(env, "-n", e2e.namespace(env), "patch", "raycluster", cluster["metadata"]["name"], "--type",
                    "json", "-p", json.dumps([{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                                               "value": target}]))
        targets[env] = target
    autoscaler: dict[str, list[str]] = {env: [] for env in targets}

    def replicas_kept():
        for env, target in targets.items():
            live = _standing_cluster(e2e, env)["spec"]["workerGroupSpecs"][0].get("replicas")
            if live != target:
                autoscaler[env].append(f"the autoscaler's replicas {target} were reverted to {live}")
        return []
    problems = _watch_all(e2e, (RECONCILES + 0.5) * argo.APP_RESYNC_SECONDS + 10, replicas_kept)
    return problems, autoscaler


def _watch_all(e2e, seconds: float, extra_check) -> dict[str, list[str]]:
    apps = {a["metadata"]["name"]: a for a in e2e.apps()}
    env_of = {name: (a["metadata"].get("labels") or {}).get("ray-gitops/environment") for name, a in apps.items()}
    counts = {name: _sync_count(a) for name, a in apps.items()}
    reconciled = {name: {_reconciled_at(a)} for name, a in apps.items()}
    problems: dict[str, list[str]] = {env: [] for env in ENVS}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(5)
        for app in e2e.apps():
            name = app["metadata"]["name"]
            env = env_of.get(name)
            if env not in problems:
                continue
            reconciled.setdefault(name, set()).add(_reconciled_at(app))
            if e2e.app_state(app)[0] != "Synced":
                problems[env].append(e2e.describe(app))
            if _sync_count(app) != counts.get(name, _sync_count(app)):
                problems[env].append(f"{name}: a new sync operation ({counts.get(name)} -> {_sync_count(app)})")
                counts[name] = _sync_count(app)
        extra_check()
    for name, seen in reconciled.items():
        if env_of.get(name) in problems and len(seen) < RECONCILES:
            problems[env_of[name]].append(f"{name}: fewer than {RECONCILES} reconciles seen (the watch proves "
                                          f"nothing for it)")
    return {env: list(dict.fromkeys(p)) for env, p in problems.items()}


@pytest.mark.parametrize("env", ENVS)
def test_stays_synced_without_new_sync_operations(e2e, watched, env):
    problems, _ = watched
    assert not problems[env], "\n".join(problems[env])


@pytest.mark.parametrize("env", AUTOSCALED)
def test_autoscaler_replicas_are_neither_reverted_nor_drift(e2e, watched, env):
    """What the Ray autoscaler does, PATCH the live replicas, is kept and does not make the app OutOfSync (the
    watch above also saw no sync)."""
    problems, autoscaler = watched
    assert not autoscaler[env] and not problems[env], "\n".join(autoscaler[env] + problems[env])


@pytest.mark.parametrize("env", ENVS)
def test_git_change_to_a_worker_group_reaches_the_live_cluster(e2e, converged, env):
    """maxReplicas of the standing cluster's first worker group + 1, in the environment file, pushed."""
    doc = e2e.env_doc(env)
    live = _standing_cluster(e2e, env)
    group = live["spec"]["workerGroupSpecs"][0]
    new_max = group["maxReplicas"] + 1

    def edit(data):
        values = data.setdefault("rayCluster", {}).setdefault("values", {})
        values.setdefault("workerGroups", {}).setdefault(group["groupName"], {})["maxReplicas"] = new_max
    e2e.edit_environment(f"{env}.yaml", edit)
    e2e.generator("render", "--env", env)
    e2e.push(f"e2e: {env} {group['groupName']} maxReplicas {new_max}")
    assert doc  # the environment composed before the edit

    def reached():
        current = _standing_cluster(e2e, env)["spec"]["workerGroupSpecs"][0]
        app = next(a for a in e2e.env_apps(env) if a["metadata"]["name"] == f"{env}-ray-cluster")
        ok = current["maxReplicas"] == new_max and e2e.app_state(app)[0] == "Synced"
        return ok, f"live maxReplicas {current['maxReplicas']} (want {new_max}); {e2e.describe(app)}"
    wait_for(reached, 240, 5, f"the git change did not reach {env}'s live RayCluster")
