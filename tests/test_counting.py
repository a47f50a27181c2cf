"""Parameter and FLOP formulas against torch's own count of the built modules.

FlopCounterMode counts matmuls and convolutions (2 x MACs), our convention too. Where it is
blind on CPU we say so and check another way:
- a fused `nn.LSTM` reports 0 FLOPs, so the test re-runs the same weights through an
  unfused LSTM written with `torch.mm` (whose output must equal the fused one) and counts that;
- `TransformerEncoderLayer`'s eval fast path reports 0, so the test counts the train-mode path
  (dropout is 0, same function) — there the CPU SDPA kernel is not counted either, so the
  attention products (4 x T^2 x d FLOPs per layer) are added from the formula.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from model_zoo.counting import count, layer_costs
from model_zoo.spec import parse_spec, resnet50_spec
from model_zoo.torch_builder import build_torch

SMALL = {
    "dense": {"input_shape": [16]},
    "conv": {"input_shape": [12, 10, 3], "kernel_size": 5, "residual": True},
    "lstm": {"input_shape": [8], "seq_len": 6},
    "gru": {"input_shape": [8], "seq_len": 6},
    "attention": {"input_shape": [8], "seq_len": 6, "heads": 4},
}


def small_spec(layer_type: str, depth: int = 3, width: int = 24):
    return parse_spec(
        {"layer_type": layer_type, "depth": depth, "width": width, **SMALL[layer_type]}
    )


def counted_flops(module, x) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(x)
    return counter.get_total_flops()


@pytest.mark.parametrize("layer_type", [*SMALL, "resnet50"])
def test_parameter_count_is_exact(layer_type):
    spec = resnet50_spec(64) if layer_type == "resnet50" else small_spec(layer_type)
    module = build_torch(spec)
    assert count(spec).params == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("layer_type", ["dense", "conv", "gru"])
def test_flops_match_flop_counter(layer_type):
    spec = small_spec(layer_type)
    x = torch.randn(1, *spec.served_input_shape)
    assert count(spec).flops == pytest.approx(counted_flops(build_torch(spec), x), rel=0.02)


def test_resnet50_flops_match_flop_counter_and_published_figure():
    spec = resnet50_spec(224)
    x = torch.randn(1, *spec.served_input_shape)
    flops = count(spec).flops
    assert flops == pytest.approx(counted_flops(build_torch(spec), x), rel=0.02)
    assert flops / 2 == pytest.approx(4.1e9, rel=0.02)  # the usual "4.1 GMACs"
    assert count(spec).params == 25_557_032


def unfused_lstm(rnn: torch.nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """The LSTM equations with explicit matmuls, so FlopCounterMode can see them."""
    batch, steps, _ = x.shape
    for layer in range(rnn.num_layers):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l{layer}"), getattr(rnn, f"weight_hh_l{layer}")
        bias = getattr(rnn, f"bias_ih_l{layer}") + getattr(rnn, f"bias_hh_l{layer}")
        h = x.new_zeros(batch, rnn.hidden_size)
        c = x.new_zeros(batch, rnn.hidden_size)
        outputs = []
        for t in range(steps):
            gates = torch.mm(x[:, t], w_ih.t()) + torch.mm(h, w_hh.t()) + bias
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        x = torch.stack(outputs, dim=1)
    return x


def test_lstm_flops_against_the_unfused_path():
    spec = small_spec("lstm")
    module = build_torch(spec)
    x = torch.randn(1, *spec.served_input_shape)
    assert counted_flops(module, x) < count(spec).flops / 10  # the fused op is invisible

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        hidden = unfused_lstm(module.rnn, x)
        logits = module.head(hidden[:, -1])
    with torch.no_grad():
        torch.testing.assert_close(logits, module(x), rtol=1e-5, atol=1e-6)
    assert count(spec).flops == pytest.approx(counter.get_total_flops(), rel=0.02)


def test_attention_flops_against_the_train_path_plus_sdpa_formula():
    spec = small_spec("attention")
    module = build_torch(spec)
    x = torch.randn(1, *spec.served_input_shape)
    assert counted_flops(module, x) < count(spec).flops / 10  # eval fast path is invisible

    module.train()  # dropout is 0: same function, unfused projections
    counter = FlopCounterMode(display=False)
    with counter:
        module(x)
    t, d = spec.seq_len, spec.width
    sdpa = spec.depth * 4 * t * t * d
    assert count(spec).flops == pytest.approx(counter.get_total_flops() + sdpa, rel=0.02)


def test_bytes_and_intensity_are_consistent():
    spec = small_spec("conv")
    cost = count(spec)
    assert cost.weight_bytes == 4 * cost.params
    outputs = sum(layer.out_elements for layer in layer_costs(spec))
    assert cost.activation_bytes == 4 * (12 * 10 * 3 + outputs)
    assert cost.arithmetic_intensity == cost.flops / (cost.weight_bytes + cost.activation_bytes)
    assert count(small_spec("conv", width=48)).flops > cost.flops
