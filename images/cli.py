"""python -m images build | check | archive | release

  build    build the training image (Docker where there is an engine, buildah where there is none), then check it;
           the default name is what ENV (default minikube) renders as cluster.image, so a cluster of that
           environment finds it. An image whose inputs did not change is not built (nor checked) again
  check    run the built image's own checks: every example spec validates inside it, and its Ray and Python are
           versions.yaml's
  archive  write the built image as an OCI archive (for `ctr images import` on a node without a registry)
  release  once the archive is written, empty buildah's storage (the archive stands for the image: `build` finds it
           up to date, the e2e node imports it); CI does, for the disk
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import archive, builders, checks
from .errors import ImageError

ROOT = Path(__file__).resolve().parent.parent


def rendered_reference(env: str, variant: str) -> str:
    """The image an environment's clusters run (cluster.image), as `make render` writes it."""
    from generator import environments
    from generator.errors import RenderError
    try:
        image = environments.load(ROOT, env).doc["cluster"]["image"]
    except RenderError as exc:
        raise ImageError(str(exc)) from None
    tag = image["tag"]
    if variant != "cpu" and tag.endswith("-cpu"):
        tag = tag[: -len("cpu")] + variant
    return f"{image['repository']}:{tag}"


def _reference(args) -> str:
    if args.image and ":" in args.image.rsplit("/", 1)[-1]:
        return args.image
    if args.image or args.tag:
        default_repo, default_tag = rendered_reference(args.env, args.variant).rsplit(":", 1)
        return f"{args.image or default_repo}:{args.tag or default_tag}"
    return rendered_reference(args.env, args.variant)


def cmd_build(args) -> int:
    built = builders.build(builders.Request(_reference(args), args.variant, args.builder))
    record = builders.DEFAULT_CACHE / "last-build.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    import json
    previous = json.loads(record.read_text()) if record.is_file() else {}
    record.write_text(json.dumps({
        "reference": built.reference, "builder": built.builder, "size_bytes": built.size_bytes,
        "rebuilt": built.rebuilt, "seconds": round(built.seconds, 1),
        # the last real build's time stays on record when a later call found the image up to date
        "built_seconds": round(built.seconds, 1) if built.rebuilt else previous.get("built_seconds")}, indent=2))
    verb = "built" if built.rebuilt else "found"
    print(f"image {built.reference}: {verb} with {built.builder} in {built.seconds:.0f} s, "
          f"{built.size_bytes / 2**30:.2f} GiB uncompressed")
    if not built.rebuilt:  # checked when it was built (a label ties it to its inputs)
        return 0
    return cmd_check(args)


def cmd_check(args) -> int:
    report = checks.run(_reference(args), args.builder)
    for line in report.lines:
        print(line)
    return 0 if report.ok else 1


def cmd_archive(args) -> int:
    path = archive.write(_reference(args), Path(args.output) if args.output else None)
    print(path)
    return 0


def cmd_release(args) -> int:
    path, freed = archive.release(_reference(args))
    print(f"buildah's storage released ({freed / 2**30:.1f} GiB freed); {path.name} stands for the image")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m images", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("build", cmd_build), ("check", cmd_check), ("archive", cmd_archive),
                       ("release", cmd_release)):
        p = sub.add_parser(name)
        p.set_defaults(func=func)
        p.add_argument("--env", default="minikube", help="the environment whose cluster.image names the image")
        p.add_argument("--variant", default="cpu", choices=("cpu", "gpu", "efa"))
        p.add_argument("--image", help="repository (or repository:tag) instead of the environment's")
        p.add_argument("--tag", help="tag instead of the environment's")
        p.add_argument("--builder", default="auto", choices=("auto", "docker", "buildah"))
        if name == "archive":
            p.add_argument("--output", help="the archive's path (default: .cache/images/<name>-<id>.oci.tar)")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ImageError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
