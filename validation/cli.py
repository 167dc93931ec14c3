"""Command line: ``python -m validation {validate,lint,manifests,policy,fetch-schemas} ...``.

Exit status: 0 = everything passed, 1 = validation failures or policy violations, 2 = cannot run (no schemas,
bad arguments, kubeconform broken, download failed).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .env_facts import EnvFacts
from .fetch_schemas import RAW_BASE_URL, FetchError, fetch_schemas
from .kubeconform import KubeconformError
from .policy import RULES, check_policies
from .schema_location import DEFAULT_SCHEMA_LOCATION, SCHEMA_LOCATION_ENV, MissingSchemasError
from .schema_validation import BACKENDS, validate_manifests

OK, FAILED, CANNOT_RUN = 0, 1, 2
ROOT = Path(__file__).resolve().parent.parent
_DIRS = f"DIR[{os.pathsep}DIR...]"
_LOCATION_HELP = (f"directory searched recursively for CRD YAML, or several separated by '{os.pathsep}' (searched in "
                  f"order, the first that serves a kind wins; default: ${SCHEMA_LOCATION_ENV}, else "
                  f"{DEFAULT_SCHEMA_LOCATION}). Kueue's CRDs not found there are read from Go's module cache")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m validation",
                                     description="Schema validation and policy checks of rendered manifests.")
    sub = parser.add_subparsers(dest="command", required=True)

    m = sub.add_parser("manifests", help="validate every file under an apps/<env> directory against its schema")
    m.add_argument("--apps-dir", required=True, type=Path, help="rendered manifests of one environment (apps/<env>)")
    m.add_argument("--env", help="environment name for the summary line (default: the directory name)")
    m.add_argument("--kube-version", help="Kubernetes version the environment declares, e.g. 1.34.0")
    m.add_argument("--facts-from", type=Path, metavar="ENV_FILE",
                   help="read kubernetesVersion from an environments/<env>.yaml, composed on base.yaml by the "
                        "generator's loader (--kube-version wins)")
    m.add_argument("--schema-location", metavar=_DIRS, help=_LOCATION_HELP)
    m.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="auto: kubeconform when it is on PATH, else in-process (default)")

    p = sub.add_parser("policy", help="run the policy rules over an apps/<env> directory and environment files")
    p.add_argument("--apps-dir", type=Path, help="rendered manifests of one environment (apps/<env>)")
    p.add_argument("--env", help="environment name (default: the directory name)")
    p.add_argument("--facts-from", type=Path, metavar="ENV_FILE",
                   help="read the environment facts (capabilities.gpu/efa, exposeDashboard, kubernetesVersion) "
                        "from environments/<env>.yaml, composed on base.yaml by the generator's loader; explicit "
                        "flags win")
    p.add_argument("--gpu-nodes", action=argparse.BooleanOptionalAction, default=None,
                   help="the environment has GPU nodes (default: no)")
    p.add_argument("--efa-nodes", action=argparse.BooleanOptionalAction, default=None,
                   help="the environment has EFA nodes (default: unknown, rule efa-only-on-efa-env not applied)")
    p.add_argument("--allow-dashboard-exposure", action=argparse.BooleanOptionalAction, default=None,
                   help="the environment opted in to exposing the Ray dashboard (default: no)")
    p.add_argument("--environment-file", action="append", default=[], type=Path, metavar="FILE",
                   help="an input file scanned for plaintext secrets (repeatable), e.g. environments/dev.yaml")
    p.add_argument("--rule", action="append", choices=sorted(RULES), help="run only this rule (repeatable)")
    p.add_argument("--list-rules", action="store_true", help="print the rules and what they guard, then exit")

    v = sub.add_parser("validate", help="make validate: helm lint, schema validation and policy checks of every "
                                        "environment (composed by the generator's loader) and of argocd/")
    v.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    v.add_argument("--env", help="one environment (default: all, and argocd/)")
    v.add_argument("--schema-location", metavar=_DIRS, help=_LOCATION_HELP)
    lint = sub.add_parser("lint", help="make lint: helm lint --strict every chart with every environment's values")
    lint.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    lint.add_argument("--env", help="one environment (default: all)")

    f = sub.add_parser("fetch-schemas", help="download the pinned upstream CRDs (needs network)")
    f.add_argument("--dest", type=Path, default=DEFAULT_SCHEMA_LOCATION, help=f"default: {DEFAULT_SCHEMA_LOCATION}")
    f.add_argument("--base-url", default=RAW_BASE_URL, help=f"default: {RAW_BASE_URL}")
    f.add_argument("--timeout", type=float, default=60)
    return parser


def _manifests(args: argparse.Namespace) -> int:
    kube_version = args.kube_version
    if not kube_version and args.facts_from:
        kube_version = _facts_from(args.facts_from).kubernetes_version
    if not kube_version:
        print("error: --kube-version (or --facts-from with kubernetesVersion) is required", file=sys.stderr)
        return CANNOT_RUN
    try:
        report = validate_manifests(args.apps_dir, kube_version, args.schema_location, env_name=args.env,
                                    backend=args.backend)
    except MissingSchemasError as exc:
        print(f"{args.env or args.apps_dir.name}: cannot validate: {exc}", file=sys.stderr)
        return CANNOT_RUN
    except (KubeconformError, FileNotFoundError, ValueError) as exc:
        print(f"{args.env or args.apps_dir.name}: cannot validate: {exc}", file=sys.stderr)
        return CANNOT_RUN
    print(report.render())
    return OK if report.ok else FAILED


def _policy(args: argparse.Namespace) -> int:
    if args.list_rules:
        for rule in RULES.values():
            print(f"{rule.name}: {rule.guards}")
        return OK
    if not args.apps_dir:
        print("error: --apps-dir is required", file=sys.stderr)
        return CANNOT_RUN
    try:
        base = _facts_from(args.facts_from) if args.facts_from else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return CANNOT_RUN
    name = args.env or (base.name if base else None) or args.apps_dir.name

    def pick(flag, from_file, default):
        return flag if flag is not None else from_file if base is not None else default

    facts = EnvFacts(
        name=name,
        kubernetes_version=base.kubernetes_version if base else "",
        gpu_nodes=pick(args.gpu_nodes, base and base.gpu_nodes, False),
        dashboard_exposure_allowed=pick(args.allow_dashboard_exposure, base and base.dashboard_exposure_allowed,
                                        False),
        efa_nodes=pick(args.efa_nodes, base and base.efa_nodes, None),
        origins=base.origins if base else {},
    )
    files = list(args.environment_file)
    if args.facts_from and args.facts_from not in files:
        files.append(args.facts_from)
    try:
        violations = check_policies(args.apps_dir, facts, files, rules=args.rule)
    except (FileNotFoundError, ValueError) as exc:
        print(f"{name}: cannot check policies: {exc}", file=sys.stderr)
        return CANNOT_RUN
    for violation in violations:
        print(violation)
    rules = len(args.rule or RULES)
    if violations:
        print(f"{name}: {len(violations)} policy violation(s) ({rules} rules checked)")
        return FAILED
    print(f"{name}: policies OK ({rules} rules checked)")
    return OK


def _facts_from(path: Path) -> EnvFacts:
    """An environment file's facts. A file of a repository's environments/ (next to base.yaml) is composed by the
    generator's loader, as the render composes it (kubernetesVersion comes from base.yaml); any other file is read
    alone."""
    path = Path(path)
    if path.parent.name == "environments" and (path.parent / "base.yaml").is_file() and path.stem != "base":
        from generator import environments
        from generator.errors import RenderError
        try:
            from .repository import origins
            env = environments.load(path.parent.parent, path.stem)
            return EnvFacts.from_mapping(env.doc, path.stem, origins(env))
        except RenderError as exc:
            raise ValueError(str(exc)) from None
    return EnvFacts.from_environment_file(path)


def _repository(run) -> int:
    """Run a check of the whole repository; an input the generator refuses is CANNOT_RUN with its message."""
    from generator.errors import RenderError
    try:
        return run()
    except RenderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return CANNOT_RUN


def _validate(args: argparse.Namespace) -> int:
    from .repository import validate
    return _repository(lambda: validate(args.root.resolve(), args.env, args.schema_location))


def _lint(args: argparse.Namespace) -> int:
    from .repository import lint
    return _repository(lambda: FAILED if lint(args.root.resolve(), args.env) else OK)


def _fetch(args: argparse.Namespace) -> int:
    try:
        written = fetch_schemas(args.dest, base_url=args.base_url, timeout=args.timeout,
                                log=lambda msg: print(msg, file=sys.stderr))
    except FetchError as exc:
        print(f"fetch-schemas: {exc}", file=sys.stderr)
        return CANNOT_RUN
    print(f"fetch-schemas: wrote {len(written)} CRD files under {args.dest}")
    return OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"validate": _validate, "lint": _lint, "manifests": _manifests, "policy": _policy,
               "fetch-schemas": _fetch}[args.command]
    return handler(args)
