"""What a built image must satisfy, checked inside it: every example job spec validates with the image's own
`python -m training validate`, and its Ray and Python are the versions versions.yaml pins."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from generator import versions

from . import builders
from .buildah import Buildah
from .errors import ImageError

EXAMPLES = "/home/ray/app/training/examples"
PROBE = ("import json, sys, ray, torch, tensorflow, xgboost; "
         "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'ray': ray.__version__, "
         "'torch': torch.__version__, 'tensorflow': tensorflow.__version__, 'xgboost': xgboost.__version__}))")


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    ok: bool = True

    def check(self, passed: bool, line: str) -> None:
        self.lines.append(f"{'ok  ' if passed else 'FAIL'} {line}")
        self.ok = self.ok and passed


def run_in(reference: str, builder: str, script: str) -> subprocess.CompletedProcess:
    """`sh -c script` in a container of the image, as its own user."""
    if builders.choose(builder) == "docker":
        return subprocess.run(["docker", "run", "--rm", reference, "sh", "-c", script],
                              capture_output=True, text=True)
    buildah = Buildah(builders.DEFAULT_CACHE)
    container = buildah.run("from", "--pull=never", reference)
    try:
        return subprocess.run(buildah.argv("run", container, "--", "sh", "-c", script), capture_output=True,
                              text=True, env={"BUILDAH_ISOLATION": "chroot", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    finally:
        subprocess.run(buildah.argv("rm", container), capture_output=True)


def run(reference: str, builder: str = "auto") -> Report:
    report = Report()
    proc = run_in(reference, builder, f"cd /tmp && python -m training validate {EXAMPLES}/*.yaml")
    specs = sorted((builders.ROOT / "training" / "examples").glob("*.yaml"))
    report.check(proc.returncode == 0, f"python -m training validate on {len(specs)} example specs in the image"
                 + ("" if proc.returncode == 0 else f":\n{proc.stdout}{proc.stderr}"))
    proc = run_in(reference, builder, f'python -c "{PROBE}"')
    if proc.returncode != 0:
        raise ImageError(f"the version probe failed in {reference}:\n{proc.stderr.strip()[-2000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    v = versions.pinned()
    report.check(found["ray"] == v.ray, f"Ray {found['ray']} (versions.yaml: {v.ray})")
    report.check(found["python"] == v.python, f"Python {found['python']} (versions.yaml: {v.python})")
    report.lines.append(f"     torch {found['torch']}, tensorflow {found['tensorflow']}, xgboost {found['xgboost']}")
    return report
