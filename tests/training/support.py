"""Helpers of the training package tests (the fixtures are in conftest.py): specs, a runner that writes a spec
and runs it in-process, result checks, and data in the exact on-disk format of what the loaders read."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tests.support import REPO  # noqa: F401 - the training tests import it from here

SEED_000_OUTPUT_SCHEMA = {
    # Verbatim from ../shared/seeds/000-ray-distributed-trainer.md ("Output Schema").
    "type": "object",
    "required": ["status", "results"],
    "properties": {
        "status": {"type": "string", "enum": ["success", "error", "partial"]},
        "results": {
            "type": "object",
            "properties": {
                "bestConfig": {"type": "object"},
                "bestMetric": {"type": "number"},
                "numTrials": {"type": "integer"},
                "completedTrials": {"type": "integer"},
            },
        },
        "checkpointPath": {"type": "string"},
        "clusterStatus": {
            "type": "object",
            "properties": {
                "numNodes": {"type": "integer"},
                "totalCpu": {"type": "number"},
                "totalGpu": {"type": "number"},
            },
        },
        "trainingTime": {"type": "number"},
    },
}


def assert_valid_result(result: dict[str, Any]) -> None:
    """A result validates against the shipped result schema and seed 000's output schema."""
    import jsonschema

    from training.result import validate_result

    validate_result(result)
    jsonschema.Draft202012Validator(SEED_000_OUTPUT_SCHEMA).validate(result)


class SpecRunner:
    """Write a spec into a temp folder and run it in-process with ``training.runner.run``."""

    def __init__(self, root: Path):
        self.root = root
        self.storage = root / "storage"

    def write(self, spec: dict[str, Any], name: str = "spec.yaml") -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    def run(self, spec: dict[str, Any], env: dict[str, str] | None = None, name: str = "spec.yaml"):
        from training.runner import run

        spec = json.loads(json.dumps(spec))
        spec.setdefault("checkpoint", {}).setdefault("storagePath", str(self.storage))
        path = self.write(spec, name)
        environ = {k: v for k, v in os.environ.items() if k not in ("TRAINING_FAULT_INJECTION", "TRAINING_EPOCH_LEDGER")}
        environ.update(env or {})
        code, result, written = run(str(path), output=str(self.root / f"{Path(name).stem}-result.json"), environ=environ)
        assert written, "a result JSON is always written"
        on_disk = json.loads(Path(written).read_text())
        assert on_disk == result
        assert_valid_result(result)
        return code, result


def copy_run(src_runner: SpecRunner, name: str, dest_root: Path) -> Path:
    """Copy a finished run's folder to a fresh storage path (Ray's snapshot names checkpoints relative to it)."""
    import shutil

    dest = dest_root / "storage"
    shutil.copytree(src_runner.storage / name, dest / name)
    (dest / name / "result.json").unlink(missing_ok=True)
    return dest


def digits_spec(name: str, framework: str = "pytorch", **train) -> dict[str, Any]:
    """A small 2-worker spec on the digits."""
    trainconfig = {"framework": framework, "epochs": 2, "batchSize": 32, **train}
    return {
        "name": name,
        "mode": "train",
        "config": {"numWorkers": 2, "resourcesPerWorker": {"cpu": 1}, "resourceWaitSeconds": 60},
        "trainConfig": trainconfig,
        "data": {"source": "digits"},
        "checkpoint": {"everyEpochs": 1, "maxFailures": 1},
    }


def tune_spec(name: str, scheduler: str = "fifo", samples: int = 1, epochs: int = 2,
              space: dict[str, Any] | None = None, **tune) -> dict[str, Any]:
    """A small mode: tune spec: one-worker trials (trialRunner auto -> local) of a tiny CNN on 256 digits."""
    return {
        "name": name,
        "mode": "tune",
        "config": {"numWorkers": 1, "resourcesPerWorker": {"cpu": 1}, "resourceWaitSeconds": 60},
        "trainConfig": {"framework": "pytorch", "epochs": epochs, "batchSize": 64,
                        "model": {"filters": [8, 16, 32], "dense": 32}},
        "data": {"source": "digits", "maxTrainSamples": 256, "maxValSamples": 128},
        "tuneConfig": {
            "searchSpace": space or {"lr": {"type": "grid", "values": [3e-3, 1e-2]}},
            "scheduler": scheduler, "numSamples": samples, "metric": "val_loss", "mode": "min", **tune,
        },
    }


# ------------------------------------------------------------------ CIFAR-10 in its exact on-disk format

def write_cifar10_batches(root: Path, per_batch: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a tiny ``cifar-10-batches-py`` folder exactly as the real one is laid out.

    Each batch is a pickled dict with bytes keys: ``b'batch_label'``, ``b'labels'`` (list of int),
    ``b'data'`` (uint8 array of shape (n, 3072): 1024 red, 1024 green, 1024 blue values, row-major 32x32 planes)
    and ``b'filenames'``; ``batches.meta`` holds ``b'label_names'``, ``b'num_cases_per_batch'``, ``b'num_vis'``.
    Returns the arrays written, by file name.
    """
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written = {}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, size=per_batch)]
        batch = {
            b"batch_label": f"{'testing' if name == 'test_batch' else 'training'} batch {i + 1} of 5".encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{i}_{j}.png".encode() for j in range(per_batch)],
        }
        with open(root / name, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)
        written[name] = (data, np.array(labels))
    meta = {
        b"num_cases_per_batch": per_batch,
        b"label_names": [n.encode() for n in ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                               "horse", "ship", "truck"]],
        b"num_vis": 3072,
    }
    with open(root / "batches.meta", "wb") as fh:
        pickle.dump(meta, fh, protocol=2)
    return written


# ------------------------------------------------------------------ a Ray cluster of two nodes, an S3 server

def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    import socket

    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def node_environ() -> dict[str, str]:
    """The environment of the Ray nodes and drivers these tests start: no token auth (no ~/.ray/auth_token is written
    or read), no usage reporting, no RAY_ADDRESS of the shell, this checkout importable by every worker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "AWS_"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    return env


def stop_group(proc, grace: float = 5.0) -> None:
    """End a process started with start_new_session=True and everything in its process group (its id): SIGTERM,
    then SIGKILL after ``grace`` seconds (`ray start --block` outlives its SIGTERM-ed children: it treats their exit
    as graceful and keeps waiting)."""
    import signal
    import subprocess

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; its group's stragglers are not
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return


class TwoNodeRay:
    """A Ray cluster of two nodes on this machine, as two pods of a KubeRay cluster are: the head (1 CPU), and a
    worker node (1 CPU) started in a private mount namespace where ``private_dir`` is a tmpfs of its own, so a folder
    the head's processes write there is not what the worker node's processes read, as an emptyDir or a container's
    own filesystem is not shared between two pods. Each node is ``ray start --block`` in its own process group, ended
    by its id (never ``ray stop``, which would end every Ray on the machine)."""

    def __init__(self, root: Path, private_dir: Path, env: dict[str, str] | None = None):
        self.root, self.private_dir = root, private_dir
        self.env = {**node_environ(), **(env or {})}
        self.procs: list = []
        self.address = ""
        self.temp_dir = Path("/tmp") / f"ray2n-{os.getpid()}-{os.urandom(3).hex()}"  # socket paths stay short

    def _node_args(self, ports: list[int]) -> list[str]:
        agent, grpc, metrics, runtime_env, node_manager, object_manager = ports
        return ["--num-cpus", "1", "--num-gpus", "0", "--node-ip-address", "127.0.0.1",
                "--object-store-memory", str(300 * 2**20), "--disable-usage-stats",
                "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(grpc),
                "--metrics-export-port", str(metrics), "--runtime-env-agent-port", str(runtime_env),
                "--node-manager-port", str(node_manager), "--object-manager-port", str(object_manager)]

    def start(self, timeout: float = 120.0) -> str:
        import shutil
        import subprocess
        import sys

        if not shutil.which("unshare"):
            raise RuntimeError("util-linux `unshare` is needed for a node with a private mount namespace "
                               "(apt-get install util-linux)")
        ray_cli = str(Path(sys.executable).with_name("ray"))
        ports = free_ports(15)
        gcs, dashboard, client = ports[:3]
        self.address = f"127.0.0.1:{gcs}"
        self.private_dir.mkdir(parents=True, exist_ok=True)
        env = self.env
        logs = self.root / "ray-nodes"
        logs.mkdir(parents=True, exist_ok=True)
        head = [ray_cli, "start", "--head", "--block", "--port", str(gcs), "--temp-dir", str(self.temp_dir),
                "--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
                "--ray-client-server-port", str(client), *self._node_args(ports[3:9])]
        worker = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                  'mount -t tmpfs -o size=64m tmpfs "$0" && shift && exec "$@"', str(self.private_dir), "--",
                  ray_cli, "start", "--block", "--address", self.address, *self._node_args(ports[9:15])]
        for name, cmd in (("head", head), ("worker", worker)):
            with open(logs / f"{name}.log", "wb") as log:
                self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True, cwd=self.root))
            if name == "head":
                self._wait_nodes(1, timeout, logs)
        self._wait_nodes(2, timeout, logs)
        return self.address

    def _wait_nodes(self, count: int, timeout: float, logs: Path) -> None:
        import subprocess
        import sys

        probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                 "print(sum(1 for n in ray.nodes() if n['Alive']))")
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            out = subprocess.run([sys.executable, "-c", probe, self.address], env=node_environ(),
                                 capture_output=True, text=True, timeout=60)
            seen = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
            if seen == str(count):
                return
            time.sleep(1)
        tails = {p.name: p.read_text(errors="replace")[-2000:] for p in logs.glob("*.log")}
        raise RuntimeError(f"the 2-node Ray at {self.address} did not reach {count} node(s) (last: {seen}): {tails}")

    def stop(self) -> None:
        import shutil

        for proc in reversed(self.procs):
            stop_group(proc)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def run_driver(spec: Path, address: str, env: dict[str, str], output: Path | None = None, timeout: float = 600):
    """``python -m training run`` as a RayJob's entrypoint runs it: its own process, joining RAY_ADDRESS; the result
    goes to ``output``, else where the job's own default puts it (``<storage>/<name>/result.json``)."""
    import subprocess
    import sys

    environ = {**node_environ(), **env, "RAY_ADDRESS": address}
    args = ["--output", str(output)] if output else []
    return subprocess.run([sys.executable, "-m", "training", "run", str(spec), *args],
                          env=environ, capture_output=True, text=True, timeout=timeout, cwd=REPO)


VERSITYGW = "versitygw"


def versitygw_binary() -> Path | None:
    """The S3 server the e2e builds from its Go module (`python -m e2e build versitygw`), or None when it is not built
    (or Go, which names its cache folder, is missing)."""
    from e2e import components

    try:
        component = components.BY_NAME[VERSITYGW]
        if not components.is_built(component):
            return None
        return components.binary_dir(component) / VERSITYGW
    except (KeyError, components.BuildError, OSError):
        return None


class S3Server:
    """The Versity S3 Gateway on 127.0.0.1 over a folder (its posix backend: a bucket is a folder), started by its
    process id and ended by it; ``bucket`` exists from the start, as the platform chart's init container makes it."""

    def __init__(self, binary: Path, root: Path, bucket: str = "checkpoints"):
        self.binary, self.root, self.bucket = binary, root, bucket
        self.access_key, self.secret_key = "ray-gitops-test", os.urandom(12).hex()
        self.port = free_ports(1)[0]
        self.proc = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_env(self) -> dict[str, str]:
        """The environment the charts give every Ray container for store: s3."""
        return {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def start(self, timeout: float = 30.0) -> S3Server:
        import subprocess
        import urllib.request

        (self.root / "buckets" / self.bucket).mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", ""), "ROOT_ACCESS_KEY_ID": self.access_key,
               "ROOT_SECRET_ACCESS_KEY": self.secret_key, "VGW_REGION": "us-east-1"}
        log = open(self.root / "versitygw.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen([str(self.binary), "--port", f"127.0.0.1:{self.port}", "--health", "/_/health",
                                      "posix", str(self.root / "buckets")], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/_/health", timeout=2):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"versitygw did not answer on {self.endpoint}: "
                           f"{(self.root / 'versitygw.log').read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
