"""The built-in image CNN in PyTorch: 3 conv blocks (64/128/256 filters, batch norm, dropout), dense 512.

Each block is conv-BN-ReLU, conv-BN-ReLU, 2x2 max-pool (only while the feature map is at least 2x2, so 8x8 digits
and 32x32 CIFAR both work), dropout. Then flatten, dense 512, BN, ReLU, dropout, and the class layer.
Parameters: ~3.25 M for 32x32x3 inputs, ~1.3 M for 8x8x1.
"""

from __future__ import annotations

from collections.abc import Sequence


def build_cnn(
    input_shape: tuple[int, int, int],
    num_classes: int,
    filters: Sequence[int] = (64, 128, 256),
    dense: int = 512,
    conv_dropout: float = 0.25,
    dense_dropout: float = 0.5,
):
    import torch.nn as nn

    h, w, c = input_shape
    layers = []
    in_ch = c
    for f in filters:
        layers += [
            nn.Conv2d(in_ch, f, 3, padding=1), nn.BatchNorm2d(f), nn.ReLU(inplace=True),
            nn.Conv2d(f, f, 3, padding=1), nn.BatchNorm2d(f), nn.ReLU(inplace=True),
        ]
        if h >= 2 and w >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        layers.append(nn.Dropout(conv_dropout))
        in_ch = f
    layers += [
        nn.Flatten(),
        nn.Linear(in_ch * h * w, dense), nn.BatchNorm1d(dense), nn.ReLU(inplace=True), nn.Dropout(dense_dropout),
        nn.Linear(dense, num_classes),
    ]
    return nn.Sequential(*layers)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
