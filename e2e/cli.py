"""python -m e2e build | up | down | status | bootstrap | report

  build      build the pinned upstream components from their Go modules (cached: seconds when done)
  up         start the e2e cluster in the background (idempotent) and wait until it is ready
  down       stop it: every process, nothing left behind (idempotent)
  status     is it up; the kubeconfig, contexts, logs; each Argo CD Application's sync and health
  bootstrap  apply argocd/root.yaml (as published to the local remote) to the management cluster
  report     the budgets and the summary line of the last `make e2e`
  refresh    what Argo CD's git webhook does on a push (the local remote's post-receive hook runs it)
  run        what `make e2e` does: down, up (fresh), the scenarios (pytest -m e2e tests/e2e), down, report
  try        what `make up` does: up, bootstrap Argo CD, follow every environment until it settles, say where
             to look (the real node's minikube runs for real); `make down` stops it
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import components, state

ROOT = Path(__file__).resolve().parent.parent


def cmd_build(args) -> int:
    start = time.monotonic()
    try:
        cold = components.go_caches_empty()
        paths = components.build(args.component or None)
    except components.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    seconds = time.monotonic() - start
    _record_build(components.BUILT_NOW, cold)
    for name, module, built, pinned in components.describe():
        note = "" if built == pinned else f"  (pinned {pinned}: not served by the module proxy)"
        print(f"  {name:<18} {module} {built}{note}")
    print(f"components ready in {seconds:.0f} s ({len(paths)} binaries under {components.DEFAULT_CACHE})")
    return 0


def _record_build(built: dict[str, float], cold: bool) -> None:
    """The last build: what was compiled, in how long, and whether the Go caches were empty (a cold build)."""
    results = _results()
    results["build"] = {**results.get("build", {}),
                        "last": {"components": {k: round(v, 1) for k, v in built.items()},
                                 "seconds": round(sum(built.values()), 1), "cold": cold}}
    if cold and len(built) == len(components.COMPONENTS):
        results["build"]["cold"] = results["build"]["last"]
    _save_results(results)


def _results() -> dict:
    try:
        return json.loads(state.RESULTS.read_text())
    except (OSError, ValueError):
        return {}


def _save_results(data: dict) -> None:
    state.RESULTS.parent.mkdir(parents=True, exist_ok=True)
    state.RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True))


def cmd_up(args) -> int:
    current = state.read()
    if state.supervisor_alive(current) and current.get("status") == "ready":
        _print_ready(current)
        return 0
    if state.supervisor_alive(current):
        print("the e2e cluster is starting (or stuck); run `python -m e2e down` first", file=sys.stderr)
        return 1
    cmd_down(argparse.Namespace(quiet=True))
    if components_rc := cmd_build(argparse.Namespace(component=None)):
        return components_rc
    run_dir = state.RUN_DIR
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    log = open(run_dir / "supervisor.out", "ab")
    subprocess.Popen([sys.executable, "-m", "e2e", "supervise", "--source", str(args.source)], cwd=ROOT,
                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
    start, shown = time.monotonic(), None
    while time.monotonic() - start < args.timeout:
        current = state.read()
        progress = current.get("progress")
        if progress and progress != shown:
            print(f"[e2e-up] {progress} ({time.monotonic() - start:.0f} s)", flush=True)
            shown = progress
        if current.get("status") == "ready":
            results = _results()
            results["up_seconds"] = round(time.monotonic() - start, 1)
            _save_results(results)
            _print_ready(current)
            return 0
        if current.get("status") == "failed" or (time.monotonic() - start > 5 and not state.supervisor_alive(current)
                                                  and current.get("status") != "ready"):
            print(f"error: the e2e cluster failed to start: {current.get('message', 'the supervisor died')}",
                  file=sys.stderr)
            _tail(run_dir / "supervisor.log")
            _tail(run_dir / "supervisor.out")
            cmd_down(argparse.Namespace(quiet=True))
            return 1
        time.sleep(0.5)
    print(f"error: the e2e cluster was not ready after {args.timeout:.0f} s", file=sys.stderr)
    _tail(run_dir / "supervisor.log")
    return 1


def _tail(path: Path, lines: int = 40) -> None:
    if path.exists():
        print(f"--- last lines of {path}:", file=sys.stderr)
        print("\n".join(path.read_text(errors="replace").splitlines()[-lines:]), file=sys.stderr)


def _print_ready(current: dict) -> None:
    print(f"e2e cluster ready; kubeconfig: {current['kubeconfig']}")
    for env, cluster in current.get("clusters", {}).items():
        role = " (Argo CD runs here)" if env == current.get("management") else ""
        print(f"  {env:<10} context {cluster['context']:<14} {cluster['server']}{role}")
    print(f"  git remote: {current['git']['remote']}  (checkout: {current['git']['work']})")
    print(f"  logs: {current['logs']}")
    print(f"  try: kubectl --kubeconfig {current['kubeconfig']} --context {current['argocd']['context']} "
          f"-n argocd get applications")
    print("  bootstrap (the first scenario does it): python -m e2e bootstrap")


def cmd_down(args) -> int:
    from .procs import kill_recorded
    current = state.read()
    stopped = []
    if state.supervisor_alive(current):
        os.kill(int(current["pid"]), 15)
        deadline = time.monotonic() + 60
        while state.supervisor_alive(state.read()) and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped.append("supervisor")
    stopped += kill_recorded(state.RUN_DIR / "pids")
    leftover = state.read()  # a supervisor stopped mid-start, or killed, leaves its nodes' host changes
    if leftover.get("real_nodes") and not state.supervisor_alive(leftover):
        _clean_real_nodes(leftover["real_nodes"])
    if current.get("peak_rss_bytes"):
        results = _results()
        results["peak_rss_bytes"] = max(results.get("peak_rss_bytes", 0), current["peak_rss_bytes"])
        _save_results(results)
    if not args.quiet:
        print("e2e cluster stopped" if stopped else "e2e cluster was not running")
    return 0


def _clean_real_nodes(records: list[dict]) -> None:
    """What a real node changed on the host (containers, mounts, rules, links, sysctls), undone after the processes
    were stopped: the supervisor does it on a clean stop; this covers a supervisor that died."""
    from .real_node import RealNode
    bins = {}  # kube-proxy --cleanup and kube-router --cleanup-config, from the built components (never a build)
    for name, binary in (("kubernetes", "kube-proxy"), ("kube-router", "kube-router")):
        try:
            component = components.BY_NAME[name]
            if components.is_built(component):
                bins[binary] = str(components.binary_dir(component) / binary)
        except components.BuildError:
            pass
    for record in records:
        node = RealNode.from_record(record)
        node.stop(bins, lambda message: print(message, file=sys.stderr))
    current = state.read()
    if current:
        state.write(state.RUN_DIR, real_nodes=[])


def cmd_try(args) -> int:
    """make up: the e2e cluster with its real node, Argo CD bootstrapped from this repository, and every
    environment followed until it settles (the real node's minikube runs for real); then where to look."""
    rc = cmd_up(argparse.Namespace(source=args.source, timeout=args.timeout))
    if rc:
        return rc
    from . import gitops
    current = state.read()
    print(gitops.bootstrap(current).strip())
    work = Path(current["git"]["work"])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    codes = {}
    for name in sorted({c.get("environment", key) for key, c in current["clusters"].items()}):
        print(f"[make up] following {name} until its Applications settle (make bootstrap ENV={name})", flush=True)
        codes[name] = subprocess.run([sys.executable, "-m", "ops", "--repo", str(work), "--kubeconfig",
                                      current["kubeconfig"], "bootstrap", "--env", name, "--timeout",
                                      str(args.timeout)], cwd=ROOT, env=env).returncode
    _print_where_to_look(current)
    return max(codes.values(), default=0)


def _print_where_to_look(current: dict) -> None:
    kubeconfig = current["kubeconfig"]
    ops = f"python -m ops --repo {current['git']['work']} --kubeconfig {kubeconfig}"
    print("\nThe cluster runs (make down stops it). Where to look:")
    for env, cluster in sorted(current["clusters"].items()):
        real = cluster.get("real_node")
        kind = f"real node {real['name']}" if real else "kwok nodes"
        print(f"  {env} ({kind}): kubectl --kubeconfig {kubeconfig} --context {cluster['context']} get pods -A")
        name = cluster.get("environment", env)
        print(f"    status: {ops} status --env {name}      logs: {ops} logs --env {name} --job <job>")
        if real:
            print(f"    Ray dashboard: http://{real.get('ip')}:30265 (minikube's dashboard NodePort on the node's "
                  "address)")
    print(f"  Argo CD: kubectl --kubeconfig {kubeconfig} --context {current['argocd']['context']} -n argocd "
          f"get applications")
    print(f"  git: push to {current['git']['remote']} from {current['git']['work']}: Argo CD syncs it at once")


def cmd_status(args) -> int:
    current = state.read()
    if not state.supervisor_alive(current):
        print("e2e cluster: not running")
        return 1
    print(f"e2e cluster: {current.get('status')} ({current.get('progress')})")
    if current.get("status") == "ready":
        _print_ready(current)
        from . import gitops
        for row in gitops.application_rows(current):
            print("  " + row)
    return 0


def cmd_bootstrap(args) -> int:
    from . import gitops
    current = state.read()
    if current.get("status") != "ready":
        print("error: the e2e cluster is not up (python -m e2e up)", file=sys.stderr)
        return 1
    print(gitops.bootstrap(current).strip())
    return 0


def cmd_report(args) -> int:
    results = _results()
    build = results.get("build", {})
    for label, entry in (("cold build of all components (empty Go caches)", build.get("cold")),
                         ("this run's component build", build.get("last"))):
        if entry and entry.get("components"):
            print(f"budget: {label} {entry['seconds'] / 60:.1f} min "
                  f"({', '.join(f'{k} {v:.0f} s' for k, v in sorted(entry['components'].items()))})")
    if build.get("last") and not build["last"].get("components"):
        print("budget: this run's component build: every component was cached")
    image = _image_record()
    if image:
        built = f"built in {image['built_seconds'] / 60:.1f} min" if image.get("built_seconds") else "built earlier"
        print(f"budget: training image {image['reference']} ({image['builder']}): {built}, "
              f"{image['size_bytes'] / 2**30:.2f} GiB")
    current = state.read()
    if current.get("image_import_seconds"):
        print(f"budget: importing the training image into the real node's containerd "
              f"{current['image_import_seconds']:.0f} s")
    if results.get("e2e_seconds"):
        print(f"budget: make e2e wall time {results['e2e_seconds'] / 60:.1f} min "
              f"(cluster up {results.get('up_seconds', 0):.0f} s); goal <= 10 min warm")
    if results.get("peak_rss_bytes"):
        print(f"budget: peak memory of the e2e cluster {results['peak_rss_bytes'] / 2**30:.1f} GiB (RSS, every "
              f"process)")
    scenarios = results.get("scenarios", {})
    passed = sum(1 for r in scenarios.values() if r == "passed")
    failed = sum(1 for r in scenarios.values() if r != "passed")
    for label, value in sorted((results.get("budgets") or {}).items()):
        print(f"budget: {label} {value:.0f} {'MiB' if label.endswith('(MiB)') else 's'}")
    print(f"e2e: {passed} scenarios passed, {failed} failed; {results.get('healthy_apps', 0)} applications "
          f"Synced+Healthy; {results.get('real_pods', 0)} pods ran in real containers")
    return 0 if failed == 0 and scenarios else 1


def _image_record() -> dict:
    try:
        return json.loads((ROOT / ".cache" / "images" / "last-build.json").read_text())
    except (OSError, ValueError):
        return {}


def cmd_run(args) -> int:
    """make e2e: a fresh cluster, the scenarios, teardown, and the report (its last line is the summary)."""
    start = time.monotonic()
    cmd_down(argparse.Namespace(quiet=True))
    results = _results()
    for key in ("scenarios", "healthy_apps", "apps", "apps_error", "e2e_seconds", "peak_rss_bytes"):
        results.pop(key, None)
    _save_results(results)
    up_rc = cmd_up(argparse.Namespace(source=args.source, timeout=900))
    # the scenarios run even when the cluster did not come up: each then fails (its fixture cannot start one),
    # so the summary counts them instead of reporting nothing
    pytest_args = [sys.executable, "-m", "pytest", "-m", "e2e", "tests/e2e", "-p", "no:cacheprovider",
                   "--durations=12", *args.pytest_args]
    rc = subprocess.call(pytest_args, cwd=ROOT, env={**os.environ, "E2E_SOURCE": str(args.source)}) or up_rc
    if not os.environ.get("E2E_KEEP"):
        cmd_down(argparse.Namespace(quiet=True))
    results = _results()
    results["e2e_seconds"] = round(time.monotonic() - start, 1)
    _save_results(results)
    report_rc = cmd_report(args)
    return rc or report_rc


def cmd_refresh(args) -> int:
    current = state.read()
    if current.get("status") != "ready":
        print("the e2e cluster is not up: nothing to refresh", file=sys.stderr)
        return 1
    from . import gitops
    start = time.monotonic()
    gitops.refresh(current)
    print(f"{time.strftime('%H:%M:%S')} refreshed the ApplicationSets and Applications in "
          f"{time.monotonic() - start:.1f} s")
    return 0


def cmd_supervise(args) -> int:
    from . import supervisor
    return supervisor.main(state.RUN_DIR, Path(args.source).resolve())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build the upstream components")
    p.add_argument("component", nargs="*", help=f"default: all ({', '.join(components.BY_NAME)})")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("up", help="start the e2e cluster (idempotent)")
    p.add_argument("--source", type=Path, default=ROOT, help="the repository checkout to publish (default: this)")
    p.add_argument("--timeout", type=float, default=900)
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("try", help="make up: up, bootstrap, follow every environment, where to look")
    p.add_argument("--source", type=Path, default=ROOT, help="the repository checkout to publish (default: this)")
    p.add_argument("--timeout", type=float, default=900)
    p.set_defaults(func=cmd_try)
    p = sub.add_parser("down", help="stop the e2e cluster (idempotent)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_down)
    sub.add_parser("status", help="is it up, and the Argo CD applications").set_defaults(func=cmd_status)
    sub.add_parser("bootstrap", help="apply argocd/root.yaml").set_defaults(func=cmd_bootstrap)
    sub.add_parser("report", help="budgets and the summary of the last make e2e").set_defaults(func=cmd_report)
    sub.add_parser("refresh", help="Argo CD's git webhook: refresh after a push").set_defaults(func=cmd_refresh)
    p = sub.add_parser("run", help="make e2e: fresh cluster, scenarios, teardown, report")
    p.add_argument("--source", type=Path, default=ROOT)
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --), e.g. -k bootstrap")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("supervise", help=argparse.SUPPRESS)
    p.add_argument("--source", required=True)
    p.set_defaults(func=cmd_supervise)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
