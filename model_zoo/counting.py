"""Parameters, FLOPs and bytes of a spec, derived from its layout without building it.

The roofline needs FLOPs and bytes for models too large to build cheaply (and for the
leader's job-length estimate), so they come from closed-form per-layer formulas; the tests
hold them against torch's own parameter count and `FlopCounterMode`.

Conventions (those of `torch.utils.flop_counter`): FLOPs = 2 x multiply-accumulates of the
matrix multiplies and convolutions; bias adds, activations, norms, pooling and softmax are
not counted. Activation bytes are the input plus every weighted layer's output, per sample.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from model_zoo.resnet_layout import EXPANSION, RESNET50_STAGES
from model_zoo.spec import ModelSpec


@dataclass(frozen=True)
class LayerCost:
    """One weighted layer's cost for a single sample."""

    name: str
    params: int
    macs: int
    out_elements: int


@dataclass(frozen=True)
class ModelCost:
    params: int
    flops: int  # per sample
    weight_bytes: int
    activation_bytes: int  # per sample

    @property
    def gflops(self) -> float:
        return self.flops / 1e9

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved for one sample (weights read once, activations once)."""
        return self.flops / (self.weight_bytes + self.activation_bytes)


def _linear(name: str, fan_in: int, fan_out: int, rows: int = 1) -> LayerCost:
    return LayerCost(name, fan_in * fan_out + fan_out, rows * fan_in * fan_out, rows * fan_out)


def _conv(
    name: str, c_in: int, c_out: int, k: int, h_out: int, w_out: int, bias: bool
) -> LayerCost:
    params = c_in * c_out * k * k + (c_out if bias else 0)
    return LayerCost(name, params, h_out * w_out * c_in * c_out * k * k, h_out * w_out * c_out)


def _conv_out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def _dense_layers(spec: ModelSpec) -> list[LayerCost]:
    sizes = [spec.input_shape[0], *([spec.width] * spec.depth)]
    return [_linear(f"hidden{i}", a, b) for i, (a, b) in enumerate(itertools.pairwise(sizes))]


def _conv_layers(spec: ModelSpec) -> list[LayerCost]:
    h, w, c = spec.input_shape
    k = spec.kernel_size or 3
    return [
        _conv(f"conv{i}", c if i == 0 else spec.width, spec.width, k, h, w, bias=True)
        for i in range(spec.depth)
    ]


def _recurrent_layers(spec: ModelSpec) -> list[LayerCost]:
    gates = 4 if spec.layer_type == "lstm" else 3
    steps = spec.seq_len or 1
    layers = []
    for i in range(spec.depth):
        fan_in = spec.input_shape[0] if i == 0 else spec.width
        # torch keeps two bias vectors per gate block (b_ih and b_hh).
        params = gates * spec.width * (fan_in + spec.width) + 2 * gates * spec.width
        macs = steps * gates * spec.width * (fan_in + spec.width)
        layers.append(LayerCost(f"{spec.layer_type}{i}", params, macs, steps * spec.width))
    return layers


def _attention_layers(spec: ModelSpec) -> list[LayerCost]:
    t, d = spec.seq_len or 1, spec.width
    layers = [_linear("embed", spec.input_shape[0], d, rows=t)]
    for i in range(spec.depth):
        layers += [
            _linear(f"layer{i}.in_proj", d, 3 * d, rows=t),
            # Q K^T and (softmax) V: two T x T x d products across all heads together.
            LayerCost(f"layer{i}.attention", 0, 2 * t * t * d, t * d),
            _linear(f"layer{i}.out_proj", d, d, rows=t),
            _linear(f"layer{i}.linear1", d, 4 * d, rows=t),
            _linear(f"layer{i}.linear2", 4 * d, d, rows=t),
            LayerCost(f"layer{i}.norms", 4 * d, 0, 0),
        ]
    return layers


def _resnet50_layers(spec: ModelSpec) -> list[LayerCost]:
    h, w, c = spec.input_shape

    def conv_bn(name: str, c_in: int, c_out: int, k: int, stride: int, size: tuple[int, int]):
        pad = k // 2
        out = (_conv_out(size[0], k, stride, pad), _conv_out(size[1], k, stride, pad))
        conv = _conv(name, c_in, c_out, k, out[0], out[1], bias=False)
        return [conv, LayerCost(f"{name}.bn", 2 * c_out, 0, 0)], out

    layers, size = conv_bn("conv1", c, 64, 7, 2, (h, w))
    size = (_conv_out(size[0], 3, 2, 1), _conv_out(size[1], 3, 2, 1))  # max pool
    c_in = 64
    for s, (planes, count, first_stride) in enumerate(RESNET50_STAGES):
        for b in range(count):
            stride = first_stride if b == 0 else 1
            name = f"stage{s}.block{b}"
            block, mid = conv_bn(f"{name}.conv1", c_in, planes, 1, 1, size)
            more, out = conv_bn(f"{name}.conv2", planes, planes, 3, stride, mid)
            block += more
            more, _ = conv_bn(f"{name}.conv3", planes, planes * EXPANSION, 1, 1, out)
            block += more
            if stride != 1 or c_in != planes * EXPANSION:
                more, _ = conv_bn(f"{name}.downsample", c_in, planes * EXPANSION, 1, stride, size)
                block += more
            layers += block
            c_in, size = planes * EXPANSION, out
    return layers


_LAYOUTS = {
    "dense": _dense_layers,
    "conv": _conv_layers,
    "lstm": _recurrent_layers,
    "gru": _recurrent_layers,
    "attention": _attention_layers,
    "resnet50": _resnet50_layers,
}


def layer_costs(spec: ModelSpec) -> list[LayerCost]:
    """Every weighted layer of the spec in order, the classifier head last."""
    body = _LAYOUTS[spec.layer_type](spec)
    head_in = 512 * EXPANSION if spec.layer_type == "resnet50" else spec.width
    return [*body, _linear("head", head_in, spec.num_outputs)]


def count(spec: ModelSpec) -> ModelCost:
    """Totals for one sample of the spec."""
    layers = layer_costs(spec)
    itemsize = np.dtype(spec.dtype).itemsize
    params = sum(layer.params for layer in layers)
    input_elements = int(np.prod(spec.served_input_shape))
    activations = input_elements + sum(layer.out_elements for layer in layers)
    return ModelCost(
        params=params,
        flops=2 * sum(layer.macs for layer in layers),
        weight_bytes=params * itemsize,
        activation_bytes=activations * itemsize,
    )
