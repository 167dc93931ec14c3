"""A Ray job whose checkpoint storage one node alone sees is refused before training, with the path and the fix.

Measured on a real Ray cluster of two nodes on this machine (tests/training/support.py TwoNodeRay): the worker node
runs in a private mount namespace where the storage folder is a tmpfs of its own, so what the driver writes there
is not what that node reads: two pods with their own filesystems, as a folder in a container, an emptyDir or a
ReadWriteOnce claim are. The storage check (training/shared_storage.py) writes a marker from the driver and reads it
back from a task pinned to every other node."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml

from tests.support import load_yaml
from tests.training.support import REPO, node_environ, run_driver
from training.runtime.shared_storage import read_marker

EXAMPLE = REPO / "training" / "examples" / "digits-torch.yaml"
CHECK = ("import ray, sys\n"
         "from training.errors import CheckpointError\n"
         "from training.runtime.shared_storage import check_shared\n"
         "ray.init(address=sys.argv[1], logging_level='ERROR')\n"
         "try:\n"
         "    print('others', check_shared(sys.argv[2]))\n"
         "except CheckpointError as exc:\n"
         "    print('refused', exc.message)\n")


def _check(address: str, path: str) -> str:
    out = subprocess.run([sys.executable, "-c", CHECK, address, path], env=node_environ(), capture_output=True,
                         text=True, timeout=180, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_check_tells_a_shared_folder_from_one_node_alone_sees(two_node_ray, tmp_path):
    shared = tmp_path / "shared"
    assert _check(two_node_ray.address, str(shared)) == "others 1"
    assert shared.is_dir() and not list(shared.iterdir()), "the marker is removed after the check"
    private = two_node_ray.private_dir / "storage"
    refused = _check(two_node_ray.address, str(private))
    assert refused.startswith(f"refused the checkpoint storage {private} is not shared by every Ray node"), refused
    assert re.search(r"1 of 1 other node\(s\) do not see it \(node [0-9.]+: no such file\)", refused), refused


def test_a_job_on_storage_one_node_alone_sees_stops_before_training(two_node_ray, tmp_path):
    """`python -m training run` as the RayJob's entrypoint runs it, with TRAINING_STORAGE_PATH as the charts set it:
    exit 5 (checkpoint) and an error result naming the path, the node and the fix; no worker ever started."""
    spec = load_yaml(EXAMPLE.read_text())
    spec["trainConfig"]["epochs"] = 1
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    storage = two_node_ray.private_dir / "checkpoints"
    output = tmp_path / "result.json"
    run = run_driver(path, two_node_ray.address, {"TRAINING_STORAGE_PATH": str(storage)}, output)
    assert run.returncode == 5, run.stdout[-2000:] + run.stderr[-4000:]
    result = json.loads(output.read_text())
    error = result["error"]
    assert (result["status"], error["type"], error["field"]) == ("error", "checkpoint", "checkpoint.storagePath")
    assert f"the checkpoint storage {storage} is not shared by every Ray node" in error["message"]
    assert re.search(r"\(node [0-9.]+: no such file\)", error["message"]), error["message"]
    assert "s3://" in error["message"] and "ReadWriteMany" in error["message"]
    assert "starting pytorch training" not in run.stderr and result["trainingTime"] == 0
    assert not list(storage.glob("digits-torch/epoch-*")), "no checkpoint may have been written"


def test_read_marker(tmp_path):
    marker = tmp_path / "marker"
    assert read_marker(str(marker), "abc") == (False, "no such file")
    marker.write_text("xyz")
    assert read_marker(str(marker), "abc") == (False, "a file with another token (a different file system at the same "
                                                      "path)")
    marker.write_text("abc")
    assert read_marker(str(marker), "abc") == (True, "")
