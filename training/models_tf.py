"""The built-in image CNN in Keras (tf-keras, i.e. Keras 2, which MultiWorkerMirroredStrategy needs).

Same layout as :mod:`training.models_torch`, and the same batch-norm momentum (Keras 0.9 = PyTorch 0.1; Keras'
default 0.99 leaves the moving statistics far from the data after the few hundred steps of a small run, and
validation accuracy near chance). Import only after ``TF_USE_LEGACY_KERAS=1`` is set
(:func:`keras` takes care of it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence


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
