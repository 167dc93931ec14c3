"""Data sources, read by each worker for its own shard. Nothing is downloaded at run time.

* ``digits``: scikit-learn's bundled 8x8 grey digits (1,797 images, shipped inside the wheel) -- the offline default.
* ``cifar10``: the standard python-pickle folder ``cifar-10-batches-py`` (``data_batch_1`` .. ``data_batch_5``,
  ``test_batch``, ``batches.meta``) at a local path or a pyarrow.fs URI (s3://, gs://, file://).
* ``synthetic``: random CIFAR-shaped tensors (32x32x3, 10 classes) with a weak class signal, for throughput runs.

Sharding: the training and validation sets are cut into ``world_size`` equal shards (row ``i`` goes to rank
``i % world_size``; the remainder is dropped so that every worker runs the same number of steps -- unequal step
counts deadlock collective ops). Each worker keeps only its own shard in memory.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np

from training.errors import DataError
from training.job.parts import Data
from training.runtime import storage

CIFAR_TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_TEST_FILE = "test_batch"
CIFAR_META_FILE = "batches.meta"
CIFAR_SHAPE = (32, 32, 3)


@dataclass
class Shard:
    """One worker's share of the data. Images are float32 NHWC in [0, 1]; labels int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int
    input_shape: tuple[int, int, int]
    source: str
    total_train: int
    total_val: int
    label_names: tuple[str, ...] = ()

    def tabular(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Flattened features for tree models."""
        return (
            self.x_train.reshape(len(self.x_train), -1),
            self.y_train,
            self.x_val.reshape(len(self.x_val), -1),
            self.y_val,
        )


def shard_indices(n: int, rank: int, world_size: int) -> np.ndarray:
    """Rows of an ``n``-row array that belong to ``rank``: equal-sized, interleaved."""
    per = n // world_size
    return np.arange(rank, per * world_size, world_size)[:per]


def _take(x: np.ndarray, y: np.ndarray, rank: int, world: int, limit: int | None):
    if limit:
        x, y = x[:limit], y[:limit]
    idx = shard_indices(len(x), rank, world)
    if len(idx) == 0:
        raise DataError(
            f"{len(x)} sample(s) cannot be shared by {world} workers: each worker would get none "
            "(raise data.maxTrainSamples / maxValSamples or lower config.numWorkers)"
        )
    return x[idx], y[idx], len(x)


# ---------------------------------------------------------------- digits

def _load_digits(cfg: Data, seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[..., None]  # (n, 8, 8, 1)
    y = digits.target.astype(np.int64)
    x_tr, x_va, y_tr, y_va = train_test_split(
        x, y, test_size=cfg.validation_fraction, random_state=seed, stratify=y
    )
    return x_tr, y_tr, x_va, y_va, 10, tuple(str(i) for i in range(10))


# ---------------------------------------------------------------- CIFAR-10 (python pickle batches)

def _unpickle(path: str) -> dict:
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        raise DataError(f"CIFAR-10 file not found: {path}") from None
    except OSError as exc:
        raise DataError(f"cannot read CIFAR-10 file {path}: {exc}") from None
    try:
        return pickle.loads(raw, encoding="bytes")
    except Exception as exc:
        raise DataError(f"{path} is not a CIFAR-10 python pickle batch ({type(exc).__name__}: {exc})") from None


def _get(d: dict, key: str):
    return d[key.encode()] if key.encode() in d else d[key]


def read_cifar10_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch -> (images uint8 NHWC, labels int64)."""
    d = _unpickle(path)
    try:
        data = np.asarray(_get(d, "data"), dtype=np.uint8)
        labels = np.asarray(_get(d, "labels"), dtype=np.int64)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path} lacks the 'data'/'labels' entries of a CIFAR-10 batch ({exc})") from None
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DataError(f"{path}: expected data of shape (n, 3072) and n labels, got {data.shape} and {len(labels)}")
    # Rows are 1024 red, 1024 green, 1024 blue values, each plane row-major 32x32.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, labels


def read_cifar10_meta(root: str) -> tuple[str, ...]:
    d = _unpickle(storage.join(root, CIFAR_META_FILE))
    try:
        names = _get(d, "label_names")
    except KeyError:
        raise DataError(f"{storage.join(root, CIFAR_META_FILE)} lacks 'label_names'") from None
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)


def _load_cifar10(cfg: Data, rank: int, world: int):
    root = cfg.path
    names = read_cifar10_meta(root)

    def read(files, limit):
        xs, ys, seen = [], [], 0
        for name in files:
            if limit and seen >= limit:
                break
            x, y = read_cifar10_batch(storage.join(root, name))
            xs.append(x)
            ys.append(y)
            seen += len(x)
        return np.concatenate(xs), np.concatenate(ys)

    x_tr, y_tr = read(CIFAR_TRAIN_FILES, cfg.max_train_samples)
    x_va, y_va = read([CIFAR_TEST_FILE], cfg.max_val_samples)
    return x_tr, y_tr, x_va, y_va, len(names), names


# ---------------------------------------------------------------- synthetic

def _synthetic_shard(cfg: Data, seed: int, rank: int, world: int):
    """Generated per worker: nothing is read, each rank makes only its own rows."""
    total = int(cfg.num_samples)
    if cfg.max_train_samples:
        total = min(total, int(cfg.max_train_samples))
    n_train = total // world
    n_val = max(total // 4 // world, 1)
    templates = np.random.default_rng(seed).normal(0.5, 0.25, size=(10,) + CIFAR_SHAPE).astype(np.float32)
    rng = np.random.default_rng([seed, rank])

    def make(n):
        y = rng.integers(0, 10, size=n, dtype=np.int64)
        x = 0.3 * templates[y] + 0.7 * rng.random((n,) + CIFAR_SHAPE, dtype=np.float32)
        return np.clip(x, 0, 1).astype(np.float32), y

    x_tr, y_tr = make(n_train)
    x_va, y_va = make(n_val)
    return Shard(x_tr, y_tr, x_va, y_va, 10, CIFAR_SHAPE, "synthetic", n_train * world, n_val * world,
                 tuple(str(i) for i in range(10)))


# ---------------------------------------------------------------- public API

def batch_share(global_batch: int, world_size: int) -> int:
    """One worker's batch when ``world_size`` workers train a global batch together (at least 1): with equal
    shards every worker then runs as many steps per epoch as one worker would with all the data."""
    return max(1, global_batch // world_size)


def load_shard(cfg: Data, rank: int = 0, world_size: int = 1, seed: int = 42) -> Shard:
    """The shard of ``rank`` among ``world_size`` workers for a job's data block."""
    source = cfg.source
    if source == "synthetic":
        return _synthetic_shard(cfg, seed, rank, world_size)
    if source == "digits":
        x_tr, y_tr, x_va, y_va, n_cls, names = _load_digits(cfg, seed)
        x_tr = x_tr.astype(np.float32)
        x_va = x_va.astype(np.float32)
    elif source == "cifar10":
        if not cfg.path:
            raise DataError("data.source cifar10 needs data.path (the cifar-10-batches-py folder)")
        x_tr, y_tr, x_va, y_va, n_cls, names = _load_cifar10(cfg, rank, world_size)
    else:
        raise DataError(f"unknown data source {source!r}")
    x_tr, y_tr, total_tr = _take(x_tr, y_tr, rank, world_size, cfg.max_train_samples)
    x_va, y_va, total_va = _take(x_va, y_va, rank, world_size, cfg.max_val_samples)
    if x_tr.dtype == np.uint8:
        x_tr = x_tr.astype(np.float32) / 255.0
        x_va = x_va.astype(np.float32) / 255.0
    return Shard(x_tr, y_tr, x_va, y_va, n_cls, tuple(x_tr.shape[1:]), source, total_tr, total_va, names)


def check_source(cfg: Data) -> None:
    """Driver-side check before any worker starts: the CIFAR-10 folder exists and its files are readable."""
    if cfg.source != "cifar10" or not cfg.verify_on_driver:
        return
    root = cfg.path
    try:
        if not storage.exists(root):
            raise DataError(f"data.path {root} does not exist (expected the cifar-10-batches-py folder)")
        if not storage.is_dir(root):
            raise DataError(f"data.path {root} is not a directory (expected the cifar-10-batches-py folder)")
        missing = [n for n in CIFAR_TRAIN_FILES + [CIFAR_TEST_FILE, CIFAR_META_FILE] if not storage.exists(storage.join(root, n))]
    except DataError:
        raise
    except PermissionError:
        raise DataError(f"data.path {root} is not readable (permission denied)") from None
    except OSError as exc:
        raise DataError(f"cannot read data.path {root}: {exc}") from None
    if missing:
        raise DataError(f"data.path {root} lacks CIFAR-10 file(s): {', '.join(missing)}")
    # Open the small files for real: catches unreadable permissions and a wrong format early.
    read_cifar10_meta(root)
    read_cifar10_batch(storage.join(root, CIFAR_TEST_FILE))
