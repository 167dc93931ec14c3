"""`make validate` and `make lint`: the gates of the rendered repository, run from the validation side. The
environments are loaded and composed by the generator's one loader (`generator.environments`, `generator.apps`),
so every fact a check needs (kubernetesVersion from base.yaml, the capabilities an environment overrides) is the
composed value; the generator itself never imports this package."""
from __future__ import annotations

import sys
from pathlib import Path

from .env_facts import EnvFacts
from .kubeconform import KubeconformError
from .policy import check_policies
from .schema_location import MissingSchemasError
from .schema_validation import validate_manifests

DEFAULT_KUBE_VERSION = "1.34.0"  # a chart linted on its own defaults, with no environment


def environment_names(root: Path, env: str | None) -> list[str]:
    from generator import environments
    return [env] if env else environments.names(root)


def facts(root: Path, env) -> tuple[EnvFacts, list[Path]]:
    """The policy facts of a composed environment (generator.environments.Environment), with where each key was
    set, and its files."""
    return EnvFacts.from_mapping(env.doc, env.name, origins(env)), [root / f for f in env.files]


def origins(env) -> dict[tuple, str]:
    """``{key path: "environments/<file>.yaml:<line>"}`` of a composed environment, from the generator's loader."""
    return {path: f"{loc.file}:{loc.line}" for path, loc in env.layer.origins.items() if loc.line is not None}


def lint(root: Path, env: str | None = None, out=sys.stdout) -> int:
    """helm lint --strict of every chart on its defaults and with each environment's composed values; the number
    of failures."""
    from generator import apps, charts, environments, helm
    from generator.errors import RenderError
    failures = 0
    for chart in charts.available(root).values():
        helm.lint(root, chart.path, "default", DEFAULT_KUBE_VERSION, None, f"charts/{chart.name} (defaults)")
        print(f"lint charts/{chart.name} (defaults): ok", file=out)
    for name in environment_names(root, env):
        composed = environments.load(root, name)
        for app in apps.compose(root, composed):
            try:
                helm.lint(root, app.chart.path, app.namespace, composed.kubernetes_version, app.values.data,
                          f"lint {app.key} (charts/{app.chart.name})")
                print(f"lint {app.key} (charts/{app.chart.name}): ok", file=out)
            except RenderError as exc:
                print(exc, file=out)
                failures += 1
    return failures


def validate(root: Path, env: str | None, schema_location: str | None, out=sys.stdout) -> int:
    """helm lint, schema validation (the pinned CRDs) and the policy rules of every environment (and argocd/'s
    managed layer when all are checked). 0 passed, 1 failures, 2 cannot run (no schemas, kubeconform broken)."""
    from generator import environments
    names = environment_names(root, env)
    failed = lint(root, env, out) != 0
    summaries = []
    composed = {}
    for name in names:
        composed[name] = environments.load(root, name)
        try:
            report = validate_manifests(root / "apps" / name, composed[name].kubernetes_version, schema_location,
                                        env_name=name)
        except (MissingSchemasError, KubeconformError) as exc:
            print(f"{name}: cannot validate: {exc}", file=sys.stderr)
            return 2
        print(report.render(), file=out)
        summaries.append(report.summary_line())
        failed |= not report.ok
        env_facts, files = facts(root, composed[name])
        violations = check_policies(root / "apps" / name, env_facts, files)
        for violation in violations:
            print(violation, file=out)
        summaries.append(f"{name}: policy: {len(violations)} violations")
        failed |= bool(violations)
    if not env:
        report = validate_manifests(root / "argocd" / "managed", composed[names[0]].kubernetes_version,
                                    schema_location, env_name="argocd")
        print(report.render(), file=out)
        summaries.append(report.summary_line())
        failed |= not report.ok
    print("\n".join(["", "summary:"] + ["  " + s for s in summaries]), file=out)
    return 1 if failed else 0
