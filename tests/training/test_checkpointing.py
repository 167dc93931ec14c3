"""Checkpoint manifests and corruption detection (no Ray needed)."""

from __future__ import annotations

import json

import pytest

from training.errors import CheckpointError
from training.runtime import checkpoints


def make_checkpoint(directory, epoch=3):
    directory.mkdir(parents=True)
    (directory / "model.pt").write_bytes(b"weights" * 100)
    (directory / "sub").mkdir()
    (directory / "sub" / "opt.bin").write_bytes(b"optimizer")
    checkpoints.write_manifest(str(directory), epoch=epoch, framework="pytorch",
                                 history=[{"epoch": e} for e in range(1, epoch + 1)], metrics={"val_accuracy": 0.5})
    return directory


def test_manifest_round_trip(tmp_path):
    ck = make_checkpoint(tmp_path / "epoch-000003")
    meta = checkpoints.verify(str(ck), "pytorch")
    assert meta["epoch"] == 3 and set(meta["files"]) == {"model.pt", "sub/opt.bin"}
    assert checkpoints.verify(f"file://{ck}")["epoch"] == 3


@pytest.mark.parametrize("damage, words", [
    (lambda ck: (ck / "model.pt").write_bytes(b"garbage"), "does not match"),
    (lambda ck: (ck / "sub" / "opt.bin").unlink(), "missing"),
    (lambda ck: (ck / checkpoints.META_FILE).unlink(), "missing"),
    (lambda ck: (ck / checkpoints.META_FILE).write_text("{not json"), "cannot read"),
    (lambda ck: (ck / checkpoints.META_FILE).write_text(json.dumps({"format": 1})), "lacks epoch"),
])
def test_corruption_is_detected(tmp_path, damage, words):
    ck = make_checkpoint(tmp_path / "ck")
    damage(ck)
    with pytest.raises(CheckpointError, match=words):
        checkpoints.verify(str(ck))


def test_wrong_framework(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="framework 'pytorch'"):
        checkpoints.verify(str(ck), "xgboost")


def test_latest_in_run_reads_ray_snapshot(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert checkpoints.latest_in_run(str(run)) is None
    (run / checkpoints.RAY_SNAPSHOT_FILE).write_text(json.dumps(
        {"latest_checkpoint_result": {"checkpoint_dir_name": "epoch-000004"}}))
    assert checkpoints.latest_in_run(str(run)) == f"{run}/epoch-000004"
    (run / checkpoints.RAY_SNAPSHOT_FILE).write_text("{broken")
    with pytest.raises(CheckpointError, match="unreadable"):
        checkpoints.latest_in_run(str(run))
