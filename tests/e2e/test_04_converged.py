"""Stays converged: after the first sync every Application stays Synced across several reconciles with no new sync
operations (no perpetual OutOfSync from CRD defaults, no self-heal loop); an autoscaler-style change of a worker
group's `replicas` on the live RayCluster is neither reverted nor shown as drift; a git change to any other
worker-group field does reach the live object."""
from __future__ import annotations

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


def _watch(e2e, env: str, seconds: float, extra_check=None) -> list[str]:
    """Sample the env's Applications every 5 s for `seconds`: the problems seen (OutOfSync, new syncs)."""
    apps = {a["metadata"]["name"]: a for a in e2e.env_apps(env)}
    counts = {name: _sync_count(a) for name, a in apps.items()}
    reconciled = {name: {_reconciled_at(a)} for name, a in apps.items()}
    problems: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(5)
        for app in e2e.env_apps(env):
            name = app["metadata"]["name"]
            reconciled.setdefault(name, set()).add(_reconciled_at(app))
            sync, _health = e2e.app_state(app)
            if sync != "Synced":
                problems.append(f"{e2e.describe(app)}")
            if _sync_count(app) != counts.get(name, _sync_count(app)):
                problems.append(f"{name}: a new sync operation ({counts.get(name)} -> {_sync_count(app)}): "
                                f"{((app['status'].get('operationState') or {}).get('syncResult') or {}).get('revision', '')}")
                counts[name] = _sync_count(app)
        if extra_check:
            problems += extra_check()
    few = [n for n, seen in reconciled.items() if len(seen) < RECONCILES]
    if few:
        problems.append(f"fewer than {RECONCILES} reconciles seen for {', '.join(sorted(few))} "
                        f"(the watch proves nothing for them)")
    return list(dict.fromkeys(problems))


@pytest.fixture(scope="module")
def converged(e2e, bootstrapped):
    for env in ENVS:
        e2e.wait_synced_healthy(env, 420, names={f"{env}-{app}" for app in ("platform", "ray-cluster")})
    return True


@pytest.mark.parametrize("env", ENVS)
def test_stays_synced_without_new_sync_operations(e2e, converged, env):
    problems = _watch(e2e, env, (RECONCILES + 0.5) * argo.APP_RESYNC_SECONDS + 10)
    assert not problems, "\n".join(problems)


def _standing_cluster(e2e, env) -> dict:
    clusters = e2e.objects(env, RAY, "rayclusters")
    name = e2e.env_doc(env)["rayCluster"]["name"]
    return next(c for c in clusters if c["metadata"]["name"] == name)


AUTOSCALED = envs_where(lambda doc: doc["rayCluster"].get("enabled", True)
                        and ((doc.get("cluster") or {}).get("autoscaler") or {}).get("enabled"))


@pytest.mark.parametrize("env", AUTOSCALED)
def test_autoscaler_replicas_are_neither_reverted_nor_drift(e2e, converged, env):
    """What the Ray autoscaler does: PATCH the live RayCluster's workerGroupSpecs[i].replicas."""
    cluster = _standing_cluster(e2e, env)
    assert cluster["spec"].get("enableInTreeAutoscaling"), "the rendered cluster does not autoscale"
    group = cluster["spec"]["workerGroupSpecs"][0]
    target = min(group.get("replicas", 0) + 1, group.get("maxReplicas", 1))
    assert target != group.get("replicas"), "maxReplicas leaves no room to scale"
    group_name, version = RAY
    e2e.custom(env).patch_namespaced_custom_object(
        group_name, version, e2e.namespace(env), "rayclusters", cluster["metadata"]["name"],
        [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": target}])

    def replicas_kept():
        live = _standing_cluster(e2e, env)["spec"]["workerGroupSpecs"][0].get("replicas")
        return [] if live == target else [f"the autoscaler's replicas {target} were reverted to {live}"]
    problems = _watch(e2e, env, (RECONCILES + 0.5) * argo.APP_RESYNC_SECONDS + 10, replicas_kept)
    assert not problems, "\n".join(problems)


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
