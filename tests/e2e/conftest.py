"""The e2e scenarios' shared fixture: one e2e cluster per run (python -m e2e up), bootstrapped once, and the
record `make e2e` prints its last line from. Every test in this directory is marked `e2e`: `make test` leaves them
out (-m "not e2e"), `make e2e` runs them."""
from __future__ import annotations

import json
import os
import time

import pytest

from e2e import cli, gitops, state
from tests.e2e import scenarios
from tests.e2e.harness import BUDGETS, BootstrapWatch, Harness

HERE = os.path.dirname(__file__)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(pytest.mark.e2e)


_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        previous = _outcomes.get(report.nodeid)
        if previous in (None, "passed"):
            _outcomes[report.nodeid] = "passed" if report.passed else report.outcome


@pytest.fixture(scope="session")
def e2e():
    current = state.read()
    started_here = False
    if not (state.supervisor_alive(current) and current.get("status") == "ready"):
        import argparse
        source = os.environ.get("E2E_SOURCE", str(cli.ROOT))
        rc = cli.cmd_up(argparse.Namespace(source=source, timeout=900))
        if rc != 0:
            pytest.fail("the e2e cluster did not start (see the output above)")
        started_here = True
    harness = Harness(state.read())
    yield harness
    _record(harness)
    if started_here and not os.environ.get("E2E_KEEP"):
        import argparse
        cli.cmd_down(argparse.Namespace(quiet=True))


def _record(harness: Harness) -> None:
    results = cli._results()
    results["scenarios"] = {k.split("::", 1)[1]: v for k, v in sorted(_outcomes.items()) if "::" in k}
    try:
        results["healthy_apps"] = sum(1 for app in harness.apps() if harness.synced_healthy(app))
        results["apps"] = {a["metadata"]["name"]: "/".join(harness.app_state(a)) for a in harness.apps()}
    except Exception as exc:  # noqa: BLE001 - the cluster may be gone; the scenarios' outcomes still count
        results["healthy_apps"] = 0
        results["apps_error"] = str(exc)
    results["finished"] = time.time()
    current = state.read()
    results["real_pods"] = sum(v for k, v in current.items() if k.startswith("real_pods_"))
    results["budgets"] = {**results.get("budgets", {}), **BUDGETS}
    cli._save_results(results)


# What `make bootstrap` is given: its own default (ops/cli.py --timeout 900), as a user runs it. With 600 s, eks's
# bootstrap (four control planes and the MultiKueue Secrets it waits for first) ran out twice in stop 40's runs while
# the environment converged: every other test_01 check passed, and the last apps were settling (19 of 20 ready).
MAKE_BOOTSTRAP_TIMEOUT = 900


@pytest.fixture(scope="session")
def bootstrapped(e2e):
    """The README's first deploy, as a user makes it: the Secrets made out of git (the ones `make bootstrap` names
    when missing), then `make bootstrap ENV=<env>` for every environment at once (python -m ops bootstrap: it
    applies argocd/root.yaml and follows the environment's Applications until they are Synced and Healthy). A
    watch records, from then on, when each Application was first Healthy and when each ApplicationSet appeared
    (the order the root's sync waves make); `watch.bootstraps` holds the bootstrap commands, still running."""
    watch = BootstrapWatch(e2e)
    watch.start()
    gitops.create_prerequisite_secrets(e2e.current)
    watch.bootstraps = {env: e2e.ops_background(f"bootstrap-{env}", "bootstrap", "--env", env, "--timeout",
                                                str(MAKE_BOOTSTRAP_TIMEOUT)) for env in e2e.envs}
    yield watch
    watch.stop()
    for run in watch.bootstraps.values():
        run.stop()


@pytest.fixture(scope="session")
def finished(e2e, bootstrapped):
    """Every job of every environment ended once: ({(env, kind, name): object}, [what did not end])."""
    return scenarios.finish_all(e2e)


@pytest.fixture(scope="session")
def quiet(e2e, finished):
    """One watched window after the jobs ended (tests/e2e/scenarios.py quiet_window)."""
    return scenarios.quiet_window(e2e, finished[0])


def pytest_sessionfinish(session, exitstatus):
    path = state.RESULTS
    if path.exists() and _outcomes:
        data = json.loads(path.read_text())
        data["scenarios"] = {k.split("::", 1)[1]: v for k, v in sorted(_outcomes.items()) if "::" in k}
        path.write_text(json.dumps(data, indent=2, sort_keys=True))
