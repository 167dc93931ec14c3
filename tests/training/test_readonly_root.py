"""A training job runs under a read-only root filesystem with the layout the charts give every Ray container.

The layout is read from the committed render (apps/minikube, the digits-torch RayJob's head container): its
securityContext says readOnlyRootFilesystem, its emptyDir mounts are the only writable places besides the checkpoint
claim and /dev/shm, and the env that moves the libraries' caches points into them. Here the same layout is made with
Linux namespaces (no container runtime on this machine): a private mount namespace remounts / read-only, a tmpfs
stands in for each emptyDir, a bind mount for the checkpoint claim, and the job runs as uid 1000 in a nested user
namespace. Ray's token comes from the environment, as KubeRay gives it (RAY_AUTH_TOKEN from auth.secretName).

This test starts its own Ray inside that namespace (the session's Ray runs outside it, with a writable root, so it
cannot show anything here); it costs about 40 s.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RENDERED_JOB = "apps/minikube/job-digits-torch"
SPEC = ROOT / "training" / "examples" / "digits-torch.yaml"


def _head_container_and_volumes() -> tuple[dict, dict]:
    [path] = sorted((ROOT / RENDERED_JOB).glob("rayjob-*.yaml"))
    pod = yaml.safe_load(path.read_text())["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    return pod["containers"][0], volumes


def _layout() -> tuple[list[str], dict[str, str]]:
    """The writable emptyDir mount paths (not /dev/shm: a tmpfs here already) and the env that points into them."""
    container, volumes = _head_container_and_volumes()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True, container["securityContext"]
    writable = [m["mountPath"] for m in container.get("volumeMounts") or []
                if "emptyDir" in volumes[m["name"]] and not m.get("readOnly") and m["mountPath"] != "/dev/shm"]
    assert writable, "the rendered Ray container has no writable emptyDir"
    env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e
           and any(e["value"] == p or e["value"].startswith(p.rstrip("/") + "/") for p in writable)}
    return writable, env


def _namespace_script(writable: list[str], storage: Path) -> str:
    mounts = [f"mount --bind {shlex.quote(str(storage))} {shlex.quote(str(storage))}",
              "mount -o remount,bind,ro /"]
    mounts += [f"mount -t tmpfs -o size=4g,mode=1777 tmpfs {shlex.quote(p)}" for p in writable]
    return " && ".join(mounts) + ' && exec unshare --user --map-user=1000 --map-group=1000 "$@"'


def _run_readonly(args: list[str], writable: list[str], storage: Path, env: dict[str, str]):
    if not shutil.which("unshare"):
        pytest.fail("util-linux `unshare` is needed to make a read-only root here (apt-get install util-linux)")
    command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
               _namespace_script(writable, storage), "readonly-root", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_training_runs_with_a_read_only_root(tmp_path):
    writable, layout_env = _layout()
    storage = ROOT / ".cache" / "readonly-root" / uuid.uuid4().hex[:8]  # outside /tmp: /tmp is the emptyDir
    storage.mkdir(parents=True)
    storage.chmod(0o777)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(layout_env, HOME=str(ROOT), TRAINING_STORAGE_PATH=str(storage),
                   RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        # the namespace really is read-only outside the layout (else the run below would prove nothing)
        probe = _run_readonly(["sh", "-c", f"touch {shlex.quote(str(ROOT))}/.ro-probe; touch /tmp/ok; id -u"],
                              writable, storage, env)
        assert "Read-only file system" in probe.stderr and probe.stdout.strip() == "1000", (probe.stdout,
                                                                                          probe.stderr)
        assert not (ROOT / ".ro-probe").exists()

        result_path = storage / "result.json"
        run = _run_readonly([sys.executable, "-m", "training", "run", str(SPEC), "--set", "trainConfig.epochs=1",
                             "--output", str(result_path)], writable, storage, env)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        result = json.loads(result_path.read_text())
        assert result["status"] == "success", result.get("error")
        assert result["results"]["finalMetrics"]["val_accuracy"] > 0.5, result["results"]["finalMetrics"]
        assert list(storage.glob("digits-torch/epoch-*")), "no checkpoint in the claim stand-in"
        assert "Read-only file system" not in run.stderr, run.stderr[-3000:]
    finally:
        shutil.rmtree(storage, ignore_errors=True)
