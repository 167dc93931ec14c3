"""Data sources: the real CIFAR-10 pickle loader on a tiny folder in the exact format, digits, synthetic, shards."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.training.support import write_cifar10_batches
from training.errors import DataError
from training.job.parts import Data
from training.runtime.data import check_source, load_shard, shard_indices


def test_shards_are_equal_disjoint_and_cover_all_but_the_remainder():
    n, world = 103, 3
    shards = [shard_indices(n, r, world) for r in range(world)]
    assert {len(s) for s in shards} == {n // world}
    joined = np.concatenate(shards)
    assert len(set(joined.tolist())) == len(joined) == (n // world) * world


def test_cifar10_loader_reads_the_python_pickle_format(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    written = write_cifar10_batches(root, per_batch=8)
    cfg = Data(source="cifar10", path=str(root))
    check_source(cfg)
    one = load_shard(cfg, rank=0, world_size=1)
    assert one.input_shape == (32, 32, 3) and one.num_classes == 10
    assert one.label_names[0] == "airplane" and one.label_names[-1] == "truck"
    assert len(one.x_train) == 40 and len(one.x_val) == 8
    # Row layout: 1024 red, then 1024 green, then 1024 blue values, each a row-major 32x32 plane.
    data, labels = written["data_batch_1"]
    row = data[0]
    assert one.x_train[0, 0, 0, 0] == pytest.approx(row[0] / 255.0)           # red, pixel (0, 0)
    assert one.x_train[0, 0, 1, 1] == pytest.approx(row[1024 + 1] / 255.0)   # green, pixel (0, 1)
    assert one.x_train[0, 1, 0, 2] == pytest.approx(row[2048 + 32] / 255.0)   # blue, pixel (1, 0)
    assert one.y_train[:8].tolist() == labels.tolist()
    assert one.x_train.dtype == np.float32 and 0.0 <= one.x_train.min() and one.x_train.max() <= 1.0
    # Two workers: equal halves, disjoint, interleaved.
    r0 = load_shard(cfg, rank=0, world_size=2)
    r1 = load_shard(cfg, rank=1, world_size=2)
    assert len(r0.x_train) == len(r1.x_train) == 20
    np.testing.assert_array_equal(r0.x_train, one.x_train[0::2])
    np.testing.assert_array_equal(r1.x_train, one.x_train[1::2])
    # Capped sample counts read only what is needed.
    capped = load_shard(dataclasses.replace(cfg, max_train_samples=10, max_val_samples=4), 0, 2)
    assert (len(capped.x_train), len(capped.x_val)) == (5, 2)


def test_cifar10_from_a_storage_uri(tmp_path):
    root = tmp_path / "cifar"
    write_cifar10_batches(root, per_batch=4)
    cfg = Data(source="cifar10", path=f"file://{root}")
    check_source(cfg)
    shard = load_shard(cfg, 0, 1)
    assert len(shard.x_train) == 20


def test_unreadable_cifar_paths_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        check_source(Data(source="cifar10", path=str(tmp_path / "nope")))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(DataError, match="not a directory"):
        check_source(Data(source="cifar10", path=str(tmp_path / "afile")))
    root = tmp_path / "partial"
    write_cifar10_batches(root, per_batch=2)
    (root / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3"):
        check_source(Data(source="cifar10", path=str(root)))
    root = tmp_path / "garbage"
    write_cifar10_batches(root, per_batch=2)
    (root / "test_batch").write_bytes(b"\x00not a pickle")
    with pytest.raises(DataError, match="not a CIFAR-10 python pickle batch"):
        check_source(Data(source="cifar10", path=str(root)))
    with pytest.raises(DataError, match="not a CIFAR-10"):
        load_shard(Data(source="cifar10", path=str(root)), 0, 1)


def test_digits_and_synthetic():
    d = load_shard(Data(source="digits", validation_fraction=0.2), rank=1, world_size=2, seed=1)
    assert d.input_shape == (8, 8, 1) and d.num_classes == 10
    assert d.total_train == 1437 and len(d.x_train) == 1437 // 2
    assert d.total_val == 360 and len(d.x_val) == 180
    assert d.tabular()[0].shape == (718, 64)
    s0 = load_shard(Data(source="synthetic", num_samples=64), 0, 2)
    s1 = load_shard(Data(source="synthetic", num_samples=64), 1, 2)
    assert s0.x_train.shape == (32, 32, 32, 3) and s0.input_shape == (32, 32, 3)
    assert not np.array_equal(s0.x_train, s1.x_train)  # each worker makes its own rows


def test_too_few_samples_for_the_workers():
    with pytest.raises(DataError, match="each worker would get none"):
        load_shard(Data(source="digits", max_train_samples=1), 0, 2)
