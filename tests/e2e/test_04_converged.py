"""Stays converged: after the first sync every Application stays Synced across several reconciles with no new sync
operations (no perpetual OutOfSync from CRD defaults, no self-heal loop); an autoscaler-style change of a worker
group's `replicas` on the live RayCluster is neither reverted nor shown as drift; a git change to any other
worker-group field does reach the live object. The watching is the quiet window of tests/e2e/scenarios.py."""
from __future__ import annotations

import pytest

from tests.e2e.harness import wait_for
from tests.e2e.scenarios import AUTOSCALED, ENVS, standing_cluster


@pytest.mark.parametrize("env", ENVS)
def test_stays_synced_without_new_sync_operations(e2e, quiet, env):
    assert not quiet.apps[env], "\n".join(quiet.apps[env])


@pytest.mark.parametrize("env", AUTOSCALED)
def test_autoscaler_replicas_are_neither_reverted_nor_drift(e2e, quiet, env):
    """What the Ray autoscaler does, PATCH the live replicas, is kept and does not make the app OutOfSync (the
    window also saw no sync)."""
    assert not quiet.autoscaler[env] and not quiet.apps[env], "\n".join(quiet.autoscaler[env] + quiet.apps[env])


@pytest.mark.parametrize("env", ENVS)
def test_git_change_to_a_worker_group_reaches_the_live_cluster(e2e, quiet, env):
    """maxReplicas of the standing cluster's first worker group + 1, in the environment file, pushed."""
    doc = e2e.env_doc(env)
    live = standing_cluster(e2e, env)
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
        current = standing_cluster(e2e, env)["spec"]["workerGroupSpecs"][0]
        app = next(a for a in e2e.env_apps(env) if a["metadata"]["name"] == f"{env}-ray-cluster")
        ok = current["maxReplicas"] == new_max and e2e.app_state(app)[0] == "Synced"
        return ok, f"live maxReplicas {current['maxReplicas']} (want {new_max}); {e2e.describe(app)}"
    wait_for(reached, 240, 5, f"the git change did not reach {env}'s live RayCluster")
