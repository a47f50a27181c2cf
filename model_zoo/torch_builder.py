"""Build a PyTorch module from a `ModelSpec`.

The module's interface is the served one: channels-last images in, logits out. Layers are
kept as plain, named attributes so the Keras builder can copy weights one to one and the
counting module can check itself against the real parameters.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from model_zoo.resnet import ResNet50
from model_zoo.spec import ModelSpec


class DenseNet(nn.Module):
    """`depth` hidden Linear+ReLU layers of `width` units, then a linear head."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        sizes = [spec.input_shape[0], *([spec.width] * spec.depth)]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))
        self.head = nn.Linear(spec.width, spec.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)


class ConvNet(nn.Module):
    """`depth` same-padded conv layers (optionally residual after the first), pooled, head.

    A residual layer is `relu(x + conv(x))`: one conv per residual step keeps `depth` equal
    to the number of conv layers, which is what the depth axis of a heatmap should mean.
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        channels = spec.input_shape[2]
        k = spec.kernel_size or 3
        self.residual = bool(spec.residual)
        self.convs = nn.ModuleList(
            nn.Conv2d(channels if i == 0 else spec.width, spec.width, k, padding=k // 2)
            for i in range(spec.depth)
        )
        self.head = nn.Linear(spec.width, spec.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2)  # served channels-last, computed channels-first
        for i, conv in enumerate(self.convs):
            y = conv(x)
            x = torch.relu(x + y) if self.residual and i > 0 else torch.relu(y)
        return self.head(x.mean(dim=(2, 3)))


class RecurrentNet(nn.Module):
    """A stacked LSTM or GRU over the sequence; the head reads the last time step."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        rnn_class = nn.LSTM if spec.layer_type == "lstm" else nn.GRU
        self.rnn = rnn_class(
            spec.input_shape[0], spec.width, num_layers=spec.depth, batch_first=True
        )
        self.head = nn.Linear(spec.width, spec.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1, :])


class AttentionNet(nn.Module):
    """Linear embedding, `depth` post-norm Transformer encoder layers, mean pool, head.

    Dropout is 0 so that eval and train paths compute the same function, which lets the
    FLOP check run the unfused path.
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.embed = nn.Linear(spec.input_shape[0], spec.width)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model=spec.width,
                nhead=spec.heads or 1,
                dim_feedforward=4 * spec.width,
                dropout=0.0,
                batch_first=True,
            )
            for _ in range(spec.depth)
        )
        self.head = nn.Linear(spec.width, spec.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(dim=1))


_BUILDERS: dict[str, type[nn.Module]] = {
    "dense": DenseNet,
    "conv": ConvNet,
    "lstm": RecurrentNet,
    "gru": RecurrentNet,
    "attention": AttentionNet,
    "resnet50": ResNet50,
}


def build_torch(spec: ModelSpec, seed: int = 0) -> nn.Module:
    """The spec's module with seeded random weights, in eval mode.

    Random weights are all a serving benchmark needs; the seed makes every export and
    parity check of the same spec compute the same function.
    """
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        module = _BUILDERS[spec.layer_type](spec)
        if isinstance(module, ResNet50):
            module.randomize_batchnorm()
    finally:
        torch.random.set_rng_state(generator_state)
    return module.eval()
