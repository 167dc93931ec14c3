"""python -m generator <command>: render, check-rendered, diff, chart-schemas, values, environments, bump-image.
(make validate and make lint run from the validation side: python -m validation validate | lint.)"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
import tempfile
from pathlib import Path

from . import access, argocd, chart_docs, charts, environments, render
from . import apps as apps_mod
from .errors import RenderError

ROOT = Path(__file__).resolve().parent.parent


def _root(args) -> Path:
    return Path(args.root).resolve() if args.root else ROOT


def _progress(enabled: bool):
    if not enabled:
        return None

    def show(done, total, key):
        sys.stderr.write(f"\r[render] {done}/{total} apps  {key:<60.60}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def cmd_render(args) -> int:
    root = _root(args)
    envs = [args.env] if args.env else None
    stats = render.render(root, envs, Path(args.out) if args.out else None, args.jobs,
                          _progress(sys.stderr.isatty()))
    dest = args.out or "apps/"
    for env, n in stats.per_env.items():
        print(f"rendered {env}: {n} apps")
    print(f"{stats.files} files in {dest} from {stats.helm_calls} helm calls in {stats.wall_seconds:.2f} s")
    return 0


def _text_diff(expected: dict, actual: dict, prefix: str) -> list[str]:
    out = []
    for rel in sorted(set(expected) | set(actual)):
        a = actual.get(rel, "").splitlines(keepends=True)
        b = expected.get(rel, "").splitlines(keepends=True)
        if a != b:
            out.extend(difflib.unified_diff(a, b, f"{prefix}{rel} (committed)", f"{prefix}{rel} (fresh render)"))
    return out


def _file(root: Path, rel: str) -> dict:
    return {rel: (root / rel).read_text()} if (root / rel).is_file() else {}


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.is_dir() else {}


def cmd_check_rendered(args) -> int:
    root = _root(args)
    envs = [args.env] if args.env else environments.names(root)
    stale_schemas = charts.write_schemas(root, check_only=True) + chart_docs.write_readmes(root, check_only=True)
    with tempfile.TemporaryDirectory(prefix="check-rendered-") as tmp:
        fresh = Path(tmp) / "fresh"
        render.render(root, None if not args.env else envs, fresh, args.jobs)
        diff = []
        for env in envs:
            diff += _text_diff(_files(fresh / "apps" / env), _files(root / "apps" / env), f"apps/{env}/")
        extra = []
        if not args.env:
            diff += _text_diff(argocd.generated_files(fresh / "argocd"), argocd.generated_files(root / "argocd"),
                               "argocd/")
            diff += _text_diff(_file(fresh, access.CODEOWNERS), _file(root, access.CODEOWNERS), "")
            if (root / render.APPS_DIR).is_dir():
                extra = [p.name for p in (root / render.APPS_DIR).iterdir() if p.is_dir() and p.name not in envs]
    for path in stale_schemas:
        print(f"{path.relative_to(root)} is stale: run `python -m generator chart-schemas`")
    for name in extra:
        print(f"apps/{name}/ has no environment file: run `make render` to remove it")
    if diff:
        sys.stdout.writelines(diff)
        print("\nThe committed files differ from a fresh render of environments/ and charts/: run `make render` "
              "and commit.")
    if diff or stale_schemas or extra:
        return 1
    print(f"apps/, argocd/ and .github/CODEOWNERS are up to date ({', '.join(envs)})" if not args.env else
          f"apps/{args.env}/ is up to date")
    return 0


def cmd_chart_schemas(args) -> int:
    root = _root(args)
    stale = charts.write_schemas(root, check_only=args.check)
    stale += chart_docs.write_readmes(root, check_only=args.check)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path.relative_to(root)}")
    return 1 if (args.check and stale) else 0


def cmd_values(args) -> int:
    root = _root(args)
    env = environments.load(root, args.env)
    if not args.app:
        json.dump(env.doc, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    for app in apps_mod.compose(root, env):
        if app.name == args.app:
            json.dump(app.values.data, sys.stdout, indent=2, sort_keys=True)
            print()
            return 0
    raise RenderError(f"environment {args.env!r} has no app {args.app!r}; its apps: "
                      + ", ".join(a.name for a in apps_mod.compose(root, env)))


def cmd_diff(args) -> int:
    from . import diff

    fmt = args.format or ("text" if sys.stdout.isatty() else "markdown")
    text, _ = diff.rendered_diff(_root(args), args.base, fmt, args.max_chars)
    sys.stdout.write(text)
    return 0


def cmd_bump_image(args) -> int:
    from . import bump_image

    root = _root(args)
    for file, old, new in bump_image.bump(root, args.tag, args.digest, args.env):
        print(f"{file}: cluster.image.tag {old} -> {new}")
    return cmd_render(argparse.Namespace(root=args.root, env=None, out=None, jobs=None)) if not args.no_render else 0


def cmd_environments(args) -> int:
    for name in environments.names(_root(args)):
        print(name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m generator", description=__doc__)
    parser.add_argument("--root", help="repository root (default: this checkout)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("render", help="render environments into apps/ (all, or --env)")
    p.add_argument("--env", help="one environment (default: every environment)")
    p.add_argument("--out", help="write a fresh tree here instead of swapping into apps/")
    p.add_argument("--jobs", type=int, help="parallel helm calls (default: CPU count, at least 2)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("check-rendered", help="render to a temporary directory and compare with apps/")
    p.add_argument("--env")
    p.add_argument("--jobs", type=int)
    p.set_defaults(func=cmd_check_rendered)

    p = sub.add_parser("chart-schemas", help="compose each chart's values.schema.json from the shared schema")
    p.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    p.set_defaults(func=cmd_chart_schemas)

    p = sub.add_parser("values", help="print an environment's composed document, or one app's chart values")
    p.add_argument("--env", required=True)
    p.add_argument("--app")
    p.set_defaults(func=cmd_values)

    p = sub.add_parser("diff", help="the rendered difference between a base git ref and the working tree")
    p.add_argument("--base", default="origin/main", help="base git ref (default: origin/main)")
    p.add_argument("--format", choices=["text", "markdown"],
                   help="default: text on a terminal, markdown otherwise (a PR comment)")
    p.add_argument("--max-chars", type=int,
                   help="markdown: at most this many characters (whole resources while they fit, the rest listed by "
                        "name); the pull-request comment uses 60000 (GitHub's limit is 65536)")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("bump-image", help="set the training image tag in every environment file, then re-render")
    p.add_argument("--tag", required=True)
    p.add_argument("--digest", help="sha256:... of the image (with --env: one environment's image)")
    p.add_argument("--env", help="only this environment's file")
    p.add_argument("--no-render", action="store_true")
    p.set_defaults(func=cmd_bump_image)

    p = sub.add_parser("environments", help="list the environments")
    p.set_defaults(func=cmd_environments)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RenderError as exc:
        print(f"error: {exc}" if "\n" not in str(exc) else f"error:\n{exc}", file=sys.stderr)
        return 1
