"""Checkpoints on s3:// to the object store the charts render (the Versity S3 Gateway, built from its Go module by
`python -m e2e build versitygw`), as a RayJob's pods reach it: the digits PyTorch example on 2 Ray Train workers on
a Ray cluster of two nodes (one worker on each), storage and credentials from the environment the charts set
(TRAINING_STORAGE_PATH, AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). Checkpoints are
written to the store, the result names them by s3:// URI, and a second run resumes from the last one. Skipped only
when the server is not built."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import yaml

from tests.training.support import REPO, run_driver
from training.errors import CheckpointError

EXAMPLE = REPO / "training" / "examples" / "digits-torch.yaml"


def _spec(tmp_path, epochs: int):
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["trainConfig"]["epochs"] = epochs
    spec["checkpoint"].update(everyEpochs=1)
    spec["data"]["maxTrainSamples"] = 400
    path = tmp_path / f"spec-{epochs}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_digits_on_two_nodes_checkpoints_to_s3_and_resumes(s3_server, two_node_ray, tmp_path):
    prefix = f"runs-{uuid.uuid4().hex[:8]}"
    storage = f"s3://{s3_server.bucket}/{prefix}"
    env = {**s3_server.client_env, "TRAINING_STORAGE_PATH": storage}
    on_disk = s3_server.root / "buckets" / s3_server.bucket / prefix / "digits-torch"  # the gateway's posix backend

    first = run_driver(_spec(tmp_path, 2), two_node_ray.address, env)
    assert first.returncode == 0, first.stderr[-5000:]
    assert f"result (success) written to {storage}/digits-torch/result.json" in first.stderr
    result = json.loads((on_disk / "result.json").read_text())  # read from the store, as a user would
    assert result == json.loads(first.stdout), "the result in the store is the one printed"
    assert result["status"] == "success" and result["clusterStatus"]["numNodes"] == 2, result
    assert "seen by the driver's node and 1 other node(s)" in first.stderr
    assert result["runPath"] == f"{storage}/digits-torch"
    assert result["results"]["latestCheckpointPath"] == f"{storage}/digits-torch/epoch-000002"
    assert result["checkpointPath"].startswith(f"{storage}/digits-torch/epoch-"), result["checkpointPath"]
    for epoch in (1, 2):
        files = {p.name for p in (on_disk / f"epoch-{epoch:06d}").iterdir()}
        assert {"model.pt", "training_checkpoint.json"} <= files, files

    second = run_driver(_spec(tmp_path, 3), two_node_ray.address, env)
    assert second.returncode == 0, second.stderr[-5000:]
    resumed = json.loads((on_disk / "result.json").read_text())["results"]
    assert (resumed["resumedFromEpoch"], resumed["epochsTrainedThisRun"]) == (2, [3]), resumed
    assert f"continues from checkpoint {storage}/digits-torch/epoch-000002" in second.stderr
    assert (on_disk / "epoch-000003" / "model.pt").is_file()
    assert resumed["finalMetrics"]["val_accuracy"] > 0.3, resumed["finalMetrics"]


def test_a_bucket_that_does_not_exist_is_named_before_ray(s3_server, monkeypatch):
    from training.shared_storage import write_marker

    for key, value in s3_server.client_env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(CheckpointError) as info:
        write_marker("s3://no-such-bucket/runs")
    assert "cannot write to the checkpoint storage s3://no-such-bucket/runs" in info.value.message
    assert "the bucket must exist" in info.value.message and info.value.field == "checkpoint.storagePath"
    path, token = write_marker(f"s3://{s3_server.bucket}/probe")
    assert (s3_server.root / "buckets" / s3_server.bucket / "probe" / path.rsplit("/", 1)[-1]).read_text() == token


def _namespace(writable: list[str], uid: int, command: list[str], env: dict[str, str], **popen):
    """``command`` in a private mount namespace where / is read-only and only ``writable`` (bind mounts of
    themselves) and a tmpfs at /tmp can be written, as uid ``uid``: the pod's securityContext, without a container
    runtime."""
    import shlex
    import subprocess

    mounts = [f"mount --bind {shlex.quote(p)} {shlex.quote(p)}" for p in writable]
    mounts += ["mount -o remount,bind,ro /", "mount -t tmpfs -o size=64m,mode=1777 tmpfs /tmp"]
    script = " && ".join(mounts) + f' && exec unshare --user --map-user={uid} --map-group={uid} "$@"'
    return subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "store", *command],
                            env=env, **popen)


def test_the_rendered_store_runs_under_its_security_context(s3_server, tmp_path):
    """The checkpoint store as apps/minikube renders it: its init container makes the bucket, the gateway starts
    with the rendered arguments and environment under the pod's securityContext (read-only root, /tmp its scratch,
    its data volume writable, uid 10001), answers the probes' path and serves the bucket to an S3 client. The
    rendered /data and port are moved to a folder and a free port of this machine; the binary is the one the e2e
    builds from the same version as the rendered image."""
    import shutil
    import subprocess
    import urllib.request

    import pyarrow.fs as pafs

    from tests.training.support import free_ports, stop_group

    doc = yaml.safe_load((REPO / "apps" / "minikube" / "platform" / "deployment-checkpoint-store.yaml").read_text())
    pod = doc["spec"]["template"]["spec"]
    [init], [server] = pod["initContainers"], pod["containers"]
    tag = server["image"].rsplit(":", 1)[-1]
    version = subprocess.run([str(s3_server.binary), "--version"], capture_output=True, text=True).stdout
    assert f"Version  : {tag}\n" in version, (tag, version)  # the e2e builds the rendered image's version
    uid = pod["securityContext"]["runAsUser"]
    for container in (init, server):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert {m["mountPath"] for m in container["volumeMounts"]} == {"/data", "/tmp"}
    data = REPO / ".cache" / f"object-store-{uuid.uuid4().hex[:8]}"  # outside /tmp: /tmp is the scratch tmpfs
    data.mkdir(parents=True)
    port = free_ports(1)[0]

    def here(args: list[str]) -> list[str]:
        return [a.replace("/data", str(data)) if a.startswith("/data") else (f"127.0.0.1:{port}" if a == ":7070" else a)
                for a in args]

    secrets = {"accessKeyId": "store-test", "secretAccessKey": uuid.uuid4().hex}
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    for entry in server["env"]:
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
        env[entry["name"]] = secrets[ref["key"]] if ref else entry["value"]
    try:
        made = _namespace([str(data)], uid, here(init["command"]), env)
        assert made.wait(timeout=60) == 0
        bucket = data / "buckets" / "checkpoints"
        assert bucket.is_dir(), "the init container makes the bucket"
        log = open(tmp_path / "store.log", "wb")  # noqa: SIM115 - closed below
        proc = _namespace([str(data)], uid, [str(s3_server.binary), *here(server["args"])], env, stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
        try:
            probe = server["readinessProbe"]["httpGet"]["path"]
            for _ in range(100):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe}", timeout=2) as answer:
                        assert answer.status == 200
                        break
                except OSError:
                    time.sleep(0.2)
            else:
                raise AssertionError((tmp_path / "store.log").read_text(errors="replace")[-3000:])
            fs = pafs.S3FileSystem(endpoint_override=f"http://127.0.0.1:{port}", region="us-east-1",
                                   access_key=secrets["accessKeyId"], secret_key=secrets["secretAccessKey"])
            with fs.open_output_stream("checkpoints/runs/probe.bin") as out:
                out.write(b"x" * 3_000_000)
            assert fs.get_file_info("checkpoints/runs/probe.bin").size == 3_000_000
            assert (bucket / "runs" / "probe.bin").stat().st_size == 3_000_000
            assert "read-only file system" not in (tmp_path / "store.log").read_text(errors="replace").lower()
        finally:
            stop_group(proc)
            log.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
