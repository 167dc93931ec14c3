"""python -m ops bootstrap | status | fleet | logs | diagnose | retry | watch | bench-cluster | scan
(make bootstrap ENV=..., make status, ...)

Exit codes: 0 done / healthy; 1 not healthy (a failed job, an app not synced, a failure that needs a change);
2 bad input (unknown environment, job or context; a job name matching two kinds); 3 a cluster or Argo CD
unreachable, or Argo CD not installed; 4 timed out waiting.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .targets import EXIT_NOT_HEALTHY, Clients, OpsError, environment_names, target

ROOT = Path(__file__).resolve().parent.parent


def _root(args) -> Path:
    return Path(args.repo).resolve() if args.repo else ROOT


def _envs(args) -> list[str]:
    known = environment_names(_root(args))
    if args.env:
        if args.env not in known:
            raise OpsError(f"unknown environment {args.env!r}; known environments: {', '.join(known) or 'none'} "
                           f"(each is a file environments/<name>.yaml)")
        return [args.env]
    return known


def _one_env(args) -> str:
    envs = _envs(args)
    if len(envs) == 1:
        return envs[0]
    raise OpsError(f"name the environment: ENV= one of {', '.join(envs)}")


def cmd_bootstrap(args) -> int:
    from .bootstrap import bootstrap
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    return bootstrap(Clients(tgt.kubeconfig), tgt, _root(args), timeout=args.timeout)


def cmd_status(args) -> int:
    from .status import environment_status, healthy, render_table
    results = []
    for env in _envs(args):
        tgt = target(_root(args), env, args.kubeconfig)
        results.append(environment_status(Clients(tgt.kubeconfig), tgt, args.job))
    if args.json:
        print(json.dumps({"environments": results}, indent=2, default=str))
    else:
        print("\n\n".join(render_table(r) for r in results))
    return 0 if all(healthy(r) for r in results) else EXIT_NOT_HEALTHY


def cmd_fleet(args) -> int:
    from .fleet import fleet_status, render_table
    from .targets import EXIT_UNREACHABLE, fleet
    results = []
    for env in _envs(args):
        targets = fleet(_root(args), env, args.kubeconfig)
        results.append(fleet_status(Clients(targets[0].kubeconfig), targets, _root(args)))
    if args.json:
        print(json.dumps({"environments": results}, indent=2, default=str))
    else:
        print("\n\n".join(render_table(r) for r in results))
    if any(c["unreachable"] for r in results for c in r["clusters"]):
        return EXIT_UNREACHABLE
    return EXIT_NOT_HEALTHY if any(r["drift"] for r in results) else 0


def cmd_logs(args) -> int:
    from . import logs
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    clients = Clients(tgt.kubeconfig)
    if not args.follow:
        logs.print_logs(clients, tgt, args.job, tail=args.tail)
        return 0
    run = logs.Follower(clients, tgt, args.job).run(timeout=args.timeout)
    return 0 if run.succeeded or not run.finished else EXIT_NOT_HEALTHY


def cmd_audit(args) -> int:
    from .audit import audit, render
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    logs = [Path(p) for p in args.audit_log or []]
    print(render(audit(Clients(tgt.kubeconfig), tgt, _root(args), args.job, logs)))
    return 0


def cmd_diagnose(args) -> int:
    from .diagnose import diagnose, render
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    result = diagnose(Clients(tgt.kubeconfig), tgt, args.job)
    if args.json:
        print(json.dumps({"job": result.job, "run": result.run, "state": result.state,
                          "succeeded": result.succeeded, "known": result.known,
                          "retryable": result.retryable,
                          "findings": [{"class": f.failure.name, "title": f.failure.title, "evidence": f.evidence,
                                        "source": f.source, "fix": f.fix,
                                        "retryable": f.failure.retryable} for f in result.findings],
                          "lastLines": result.last_lines}, indent=2))
    else:
        print(render(result))
    return 0 if result.known or result.succeeded else EXIT_NOT_HEALTHY


def cmd_retry(args) -> int:
    from .retry import current_run, retry
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    current_run(tgt, args.job)  # an unknown job is refused before anything is written
    retry(_root(args), tgt, args.job, args.reason, push=args.push)
    return 0


def cmd_watch(args) -> int:
    from .watch import watch
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    return watch(Clients(tgt.kubeconfig), tgt, args.job, _root(args), auto_retry=args.auto_retry,
                 timeout=args.timeout, poll=args.poll)


def cmd_bench_cluster(args) -> int:
    from .bench import DEFAULT_OUT, Settings, bench_cluster
    tgt = target(_root(args), _one_env(args), args.kubeconfig)
    settings = Settings(framework=args.framework, workers=args.workers, epochs=args.epochs, data=args.data,
                        batch_size=args.batch_size, tiny=args.tiny)
    out = Path(args.out or (_root(args) / DEFAULT_OUT))
    return bench_cluster(Clients(tgt.kubeconfig), tgt, _root(args), settings, out, keep=args.keep,
                         timeout=args.timeout, poll=args.poll)


def cmd_scan(args) -> int:
    from . import scan
    allowlist = scan.load_allowlist(Path(args.allowlist) if args.allowlist else scan.ALLOWLIST)
    results = []
    for env in _envs(args):
        tgt = target(_root(args), env, args.kubeconfig)
        result = scan.scan(Clients(tgt.kubeconfig), tgt, allowlist, Path(args.keep) / env if args.keep else None)
        print(scan.render(result), flush=True)
        results.append(result)
    if len(results) > 1:
        total = scan.Result("all", sum(r.pods for r in results), sum(r.passed for r in results),
                            [f for r in results for f in r.findings])
        print(total.summary())
    return scan.exit_code(results)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: a positive integer")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="the repository checkout (default: this one)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text, env_required=False, job=False):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--env", required=env_required, help="the environment (environments/<env>.yaml)")
        if job:
            p.add_argument("--job", required=True, help="the job's name in the environment (jobs.<name>)")
        p.set_defaults(func=func)
        return p

    p = add("bootstrap", cmd_bootstrap, "apply argocd/root.yaml and wait until the environment is Synced and Healthy")
    p.add_argument("--timeout", type=float, default=900)
    p = add("status", cmd_status, "apps, Ray clusters, jobs and the checkpoint claim, per environment")
    p.add_argument("--job")
    p.add_argument("--json", action="store_true")
    p = add("fleet", cmd_fleet, "every cluster of an environment side by side (apps' revisions, operator images, CRD "
            "versions, GPUs, the Secrets out of git) and the drift between them, each with its fix")
    p.add_argument("--json", action="store_true")
    p = add("logs", cmd_logs, "a job's output, prefixed by pod", job=True)
    p.add_argument("--follow", action="store_true", help="follow across new pods and restarts until the run ends")
    p.add_argument("--tail", type=int, help="the last N lines of each pod (without --follow)")
    p.add_argument("--timeout", type=float)
    p = add("diagnose", cmd_diagnose, "classify a failed or stuck job; evidence and the fix", job=True)
    p.add_argument("--json", action="store_true")
    p = add("audit", cmd_audit, "who changed a job (commits), who synced it (Argo CD's history), what ran (runs, "
            "pods), and with --audit-log what the API server recorded", job=True)
    p.add_argument("--audit-log", action="append", metavar="FILE",
                   help="the target cluster's API server audit log (JSON lines); repeat for rotated files")
    p = add("retry", cmd_retry, "start a new run of a job through git (edit, render, commit)", job=True)
    p.add_argument("--reason", default="retry", help="why, for the commit message")
    p.add_argument("--push", action="store_true", help="push the commit (else: print what to push)")
    p = add("watch", cmd_watch, "follow a job to its end; --auto-retry N retries retryable failures", job=True)
    p.add_argument("--auto-retry", type=int, default=0)
    p.add_argument("--timeout", type=float, default=86400)
    p.add_argument("--poll", type=float, default=10)
    p = add("bench-cluster", cmd_bench_cluster, "seed 002 as two jobs of the environment, through git: baseline "
            "vs Ray Train, JSON + markdown + plot")
    p.add_argument("--framework", choices=["pytorch", "tensorflow"], default="pytorch")
    p.add_argument("--workers", type=_positive, default=2, help="Ray Train workers (1 CPU each); default 2")
    p.add_argument("--epochs", type=_positive, help="default: make bench-train's (5; --tiny 1)")
    p.add_argument("--data", choices=["digits", "synthetic"], default="digits")
    p.add_argument("--batch-size", type=_positive, default=64, help="global batch of one step (split over the workers); default 64")
    p.add_argument("--tiny", action="store_true", help="a seconds-long run (256 samples, a small CNN, 1 epoch)")
    p.add_argument("--out", help="output folder; default results/bench-cluster")
    p.add_argument("--keep", action="store_true", help="keep the two benchmark jobs in the environment after")
    p.add_argument("--timeout", type=float, default=3600, help="seconds for the whole benchmark")
    p.add_argument("--poll", type=float, default=5)
    p = add("scan", cmd_scan, "checkov on the pods running in the environment's namespace (all environments by "
            "default); accepted findings in security/checkov-allowlist.yaml")
    p.add_argument("--allowlist", help="default: security/checkov-allowlist.yaml")
    p.add_argument("--keep", help="keep the scanned manifests under this folder (one per environment)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except OpsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
