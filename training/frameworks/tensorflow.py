"""The built-in trainer of ``framework: tensorflow``: the small CNN in tf-keras under MultiWorkerMirroredStrategy.

Ray's TensorflowTrainer sets ``TF_CONFIG`` on each worker; the strategy all-reduces gradients between them.
Each worker feeds its own shard (``distribute_datasets_from_function``: no auto-sharding on top of ours).
Saving under MWMS is collective, so every rank writes a checkpoint (non-zero ranks to a throw-away folder).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from training.frameworks.base import Framework

if TYPE_CHECKING:
    from training.runtime.worker import WorkerContext

TF_CKPT_PREFIX = "tf/ckpt"


def train(ctx: WorkerContext) -> None:
    # The context has put TF_WORKER_ENV into this process's environment: TensorFlow is imported after it.
    import tensorflow as tf


    k = keras()
    tf.get_logger().setLevel("ERROR")  # MWMS logs every collective it builds at INFO
    try:
        tf.config.threading.set_intra_op_parallelism_threads(ctx.threads)
    except RuntimeError:
        pass  # already initialized in this process
    k.utils.set_random_seed(ctx.seed)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    shard = ctx.data()
    model, tf_ckpt = _model(ctx, strategy, shard)
    steps, bs, val_data, vsteps = _batches(ctx, strategy, shard)

    def train_data(epoch):
        def fn(_input_context):
            ds = tf.data.Dataset.from_tensor_slices((shard.x_train, shard.y_train))
            ds = ds.shuffle(len(shard.x_train), seed=ctx.seed * 100003 + epoch * 101 + ctx.rank).repeat()
            return ds.batch(bs, drop_remainder=True).prefetch(2)
        return strategy.distribute_datasets_from_function(fn)

    class FaultHook(k.callbacks.Callback):
        def __init__(self, epoch):
            super().__init__()
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            ctx.batch_hook(self.epoch, batch, steps)

    def evaluate():
        vals = model.evaluate(val_data(), steps=vsteps, verbose=0, return_dict=True)
        return {"val_loss": vals["loss"], "val_accuracy": vals["accuracy"]}

    def save(directory: str) -> None:
        tf_ckpt.write(os.path.join(directory, TF_CKPT_PREFIX))

    for epoch in ctx.epochs():
        hist = model.fit(train_data(epoch), epochs=epoch, initial_epoch=epoch - 1, steps_per_epoch=steps,
                         verbose=0, callbacks=[FaultHook(epoch)])
        metrics = {"loss": hist.history["loss"][-1], "accuracy": hist.history["accuracy"][-1], **evaluate(),
                   "samples": steps * bs * ctx.world_size, "steps": steps}
        ctx.report(epoch, metrics, save=save, save_on_all_ranks=True)

    if not ctx.trained_epochs:
        ctx.record_evaluation(evaluate())


def _model(ctx: WorkerContext, strategy, shard):
    """The compiled CNN and its tf.train.Checkpoint under the strategy, restored from the run's checkpoint if any."""
    import tensorflow as tf


    k = keras()
    mc = ctx.model
    with strategy.scope():
        model = build_cnn(shard.input_shape, shard.num_classes, mc.filters, mc.dense, mc.conv_dropout, mc.dense_dropout)
        optimizer = k.optimizers.Adam(learning_rate=ctx.lr)
        model.compile(optimizer=optimizer,
                      loss=k.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[k.metrics.SparseCategoricalAccuracy(name="accuracy")])
        tf_ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)

        def load(directory: str) -> None:
            index = ctx.checkpoint_file(TF_CKPT_PREFIX + ".index")
            tf_ckpt.read(index[: -len(".index")]).expect_partial()

        restored = ctx.restore(load)
    if ctx.rank == 0 and not restored:
        ctx.log(f"tensorflow CNN {list(mc.filters)}/{mc.dense}: {model.count_params():,} parameters; "
                f"{ctx.world_size} worker(s) x {len(shard.x_train)} training samples "
                f"({shard.source}, input {shard.input_shape}), {strategy.num_replicas_in_sync} replicas in sync")
    return model, tf_ckpt


def _batches(ctx: WorkerContext, strategy, shard):
    """Steps per epoch and this worker's batch (its share of the global batch), and the validation data: batches
    must be equal on every worker (collectives), so the largest batch <= 256 that divides the shard covers all of
    it; a shard with no such divisor >= 16 drops its last partial batch instead."""
    import tensorflow as tf

    n = len(shard.x_train)
    bs = min(ctx.batch_size, n)
    steps = max(n // bs, 1)
    n_val = len(shard.x_val)
    vbs = next((d for d in range(min(256, n_val), 0, -1) if n_val % d == 0), 1)
    if vbs < 16:
        vbs = min(ctx.batch_size, n_val)

    def val_data():
        def fn(_input_context):
            return tf.data.Dataset.from_tensor_slices((shard.x_val, shard.y_val)).batch(vbs, drop_remainder=True)
        return strategy.distribute_datasets_from_function(fn)

    return steps, bs, val_data, max(n_val // vbs, 1)


# ---------------------------------------------------------------- the model
# The built-in image CNN in Keras (tf-keras, i.e. Keras 2, which MultiWorkerMirroredStrategy needs).
# 
# Same layout as the PyTorch CNN (:mod:`training.frameworks.pytorch`), and the same batch-norm momentum (Keras 0.9 = PyTorch 0.1; Keras'
# default 0.99 leaves the moving statistics far from the data after the few hundred steps of a small run, and
# validation accuracy near chance). Import only after ``TF_USE_LEGACY_KERAS=1`` is set
# (:func:`keras` takes care of it).
def keras():
    """tf-keras (Keras 2). Keras 3 breaks under MultiWorkerMirroredStrategy (keras-team/keras#20585)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tf_keras

    return tf_keras


def build_cnn(
    input_shape: tuple[int, int, int],
    num_classes: int,
    filters: Sequence[int] = (64, 128, 256),
    dense: int = 512,
    conv_dropout: float = 0.25,
    dense_dropout: float = 0.5,
):
    k = keras()
    L = k.layers
    h, w, _ = input_shape
    model = k.Sequential([L.InputLayer(input_shape=tuple(input_shape))])
    for f in filters:
        model.add(L.Conv2D(f, 3, padding="same", use_bias=False))
        model.add(L.BatchNormalization(momentum=0.9))
        model.add(L.ReLU())
        model.add(L.Conv2D(f, 3, padding="same", use_bias=False))
        model.add(L.BatchNormalization(momentum=0.9))
        model.add(L.ReLU())
        if h >= 2 and w >= 2:
            model.add(L.MaxPooling2D(2))
            h, w = h // 2, w // 2
        model.add(L.Dropout(conv_dropout))
    model.add(L.Flatten())
    model.add(L.Dense(dense, use_bias=False))
    model.add(L.BatchNormalization(momentum=0.9))
    model.add(L.ReLU())
    model.add(L.Dropout(dense_dropout))
    model.add(L.Dense(num_classes))  # logits
    return model


# ---------------------------------------------------------------- under Ray Train

#: Variables a TensorFlow worker must see before TensorFlow is imported (also sent as the workers' runtime env).
WORKER_ENV = MappingProxyType({
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
})


def ray_trainer(run_worker, job, **common):
    from ray.train.tensorflow import TensorflowTrainer

    return TensorflowTrainer(run_worker, **common)


FRAMEWORK = Framework(
    name="tensorflow", epochs=5, batch_size=64, lr=1e-3,
    metrics=("loss", "accuracy", "val_loss", "val_accuracy", "samples", "steps"),
    loop=train, ray_trainer=ray_trainer, worker_env=WORKER_ENV)
