"""Build the Keras 3 twin of a torch module, with the torch weights copied in.

TF Serving and Triton are only comparable if they serve the same function, so the Keras
model is not initialised on its own: every layer is created, called (which builds it) and
immediately given the torch layer's weights in Keras' layout.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from model_zoo.resnet import Bottleneck, ResNet50
from model_zoo.spec import INPUT_NAME, OUTPUT_NAME, ModelSpec
from model_zoo.torch_builder import AttentionNet, ConvNet, DenseNet, RecurrentNet
from servebench.common.tf_runtime import import_keras

keras = import_keras()  # its backend set and TensorFlow's start-up chatter dropped

LAYER_NORM_EPS = 1e-5  # torch's default; Keras' default (1e-3) would change the function


def _np(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def _apply(layer: keras.layers.Layer, weights: list[np.ndarray], x):
    """Call the layer (building it), then load the torch weights into it."""
    y = layer(x)
    layer.set_weights(weights)
    return y


def _dense(torch_linear: nn.Linear, name: str, activation: str | None = None) -> tuple:
    layer = keras.layers.Dense(torch_linear.out_features, activation=activation, name=name)
    return layer, [_np(torch_linear.weight).T, _np(torch_linear.bias)]


def _conv(torch_conv: nn.Conv2d, name: str, padding: str) -> tuple:
    layer = keras.layers.Conv2D(
        torch_conv.out_channels,
        torch_conv.kernel_size,
        strides=torch_conv.stride,
        padding=padding,
        use_bias=torch_conv.bias is not None,
        name=name,
    )
    weights = [_np(torch_conv.weight).transpose(2, 3, 1, 0)]  # OIHW -> HWIO
    if torch_conv.bias is not None:
        weights.append(_np(torch_conv.bias))
    return layer, weights


def _batchnorm(torch_bn: nn.BatchNorm2d, name: str) -> tuple:
    layer = keras.layers.BatchNormalization(epsilon=torch_bn.eps, name=name)
    weights = [
        _np(torch_bn.weight),
        _np(torch_bn.bias),
        _np(torch_bn.running_mean),
        _np(torch_bn.running_var),
    ]
    return layer, weights


def _dense_body(module: DenseNet, x):
    for i, linear in enumerate(module.hidden):
        x = _apply(*_dense(linear, f"hidden{i}", "relu"), x)
    return x


def _conv_body(module: ConvNet, x):
    for i, conv in enumerate(module.convs):
        y = _apply(*_conv(conv, f"conv{i}", "same"), x)
        x = keras.layers.ReLU()(keras.layers.Add()([x, y]) if module.residual and i > 0 else y)
    return keras.layers.GlobalAveragePooling2D()(x)


def _recurrent_body(module: RecurrentNet, x):
    rnn = module.rnn
    is_lstm = isinstance(rnn, nn.LSTM)
    for i in range(rnn.num_layers):
        w_ih, w_hh = _np(getattr(rnn, f"weight_ih_l{i}")), _np(getattr(rnn, f"weight_hh_l{i}"))
        b_ih, b_hh = _np(getattr(rnn, f"bias_ih_l{i}")), _np(getattr(rnn, f"bias_hh_l{i}"))
        last = i == rnn.num_layers - 1
        if is_lstm:
            # Both frameworks order the gates input, forget, cell, output.
            layer = keras.layers.LSTM(rnn.hidden_size, return_sequences=not last, name=f"lstm{i}")
            weights = [w_ih.T, w_hh.T, b_ih + b_hh]
        else:
            # torch orders GRU gates (reset, update, new), Keras (update, reset, new); with
            # reset_after=True Keras keeps the input and recurrent biases apart, as torch does.
            def reorder(a: np.ndarray) -> np.ndarray:
                r, z, n = np.split(a, 3, axis=0)
                return np.concatenate([z, r, n], axis=0)

            layer = keras.layers.GRU(
                rnn.hidden_size, return_sequences=not last, reset_after=True, name=f"gru{i}"
            )
            weights = [reorder(w_ih).T, reorder(w_hh).T, np.stack([reorder(b_ih), reorder(b_hh)])]
        x = _apply(layer, weights, x)
    return x


def _encoder_layer(layer: nn.TransformerEncoderLayer, name: str, x):
    attn = layer.self_attn
    d, heads = attn.embed_dim, attn.num_heads
    key_dim = d // heads
    w_q, w_k, w_v = np.split(_np(attn.in_proj_weight), 3, axis=0)
    b_q, b_k, b_v = np.split(_np(attn.in_proj_bias), 3, axis=0)
    mha = keras.layers.MultiHeadAttention(heads, key_dim, name=f"{name}.self_attn")
    y = mha(x, x)
    mha.set_weights(
        [
            w_q.T.reshape(d, heads, key_dim), b_q.reshape(heads, key_dim),
            w_k.T.reshape(d, heads, key_dim), b_k.reshape(heads, key_dim),
            w_v.T.reshape(d, heads, key_dim), b_v.reshape(heads, key_dim),
            _np(attn.out_proj.weight).T.reshape(heads, key_dim, d), _np(attn.out_proj.bias),
        ]
    )  # fmt: skip

    def norm(torch_norm: nn.LayerNorm, suffix: str, value):
        keras_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPS, name=f"{name}.{suffix}"
        )
        return _apply(keras_norm, [_np(torch_norm.weight), _np(torch_norm.bias)], value)

    x = norm(layer.norm1, "norm1", keras.layers.Add()([x, y]))
    y = _apply(*_dense(layer.linear1, f"{name}.linear1", "relu"), x)
    y = _apply(*_dense(layer.linear2, f"{name}.linear2"), y)
    return norm(layer.norm2, "norm2", keras.layers.Add()([x, y]))


def _attention_body(module: AttentionNet, x):
    x = _apply(*_dense(module.embed, "embed"), x)
    for i, layer in enumerate(module.layers):
        x = _encoder_layer(layer, f"layer{i}", x)
    return keras.layers.GlobalAveragePooling1D()(x)


def _strided_conv(torch_conv: nn.Conv2d, name: str, x):
    """torch pads symmetrically; Keras 'same' with stride 2 pads only right/bottom."""
    pad = torch_conv.padding[0]
    if torch_conv.stride[0] == 1:
        return _apply(*_conv(torch_conv, name, "same" if pad else "valid"), x)
    if pad:
        x = keras.layers.ZeroPadding2D(pad)(x)
    return _apply(*_conv(torch_conv, name, "valid"), x)


def _bottleneck(block: Bottleneck, name: str, x):
    relu = keras.layers.ReLU
    shortcut = x
    if block.downsample is not None:
        conv, bn = block.downsample
        shortcut = _strided_conv(conv, f"{name}.downsample", x)
        shortcut = _apply(*_batchnorm(bn, f"{name}.downsample_bn"), shortcut)
    y = relu()(
        _apply(
            *_batchnorm(block.bn1, f"{name}.bn1"), _strided_conv(block.conv1, f"{name}.conv1", x)
        )
    )
    y = relu()(
        _apply(
            *_batchnorm(block.bn2, f"{name}.bn2"), _strided_conv(block.conv2, f"{name}.conv2", y)
        )
    )
    y = _apply(
        *_batchnorm(block.bn3, f"{name}.bn3"), _strided_conv(block.conv3, f"{name}.conv3", y)
    )
    return relu()(keras.layers.Add()([y, shortcut]))


def _resnet50_body(module: ResNet50, x):
    x = _strided_conv(module.conv1, "conv1", x)
    x = keras.layers.ReLU()(_apply(*_batchnorm(module.bn1, "bn1"), x))
    # Zero padding equals torch's -inf padding here because the input is post-ReLU (>= 0).
    x = keras.layers.MaxPooling2D(3, strides=2)(keras.layers.ZeroPadding2D(1)(x))
    for i, block in enumerate(module.blocks):
        x = _bottleneck(block, f"block{i}", x)
    return keras.layers.GlobalAveragePooling2D()(x)


_BODIES = {
    DenseNet: _dense_body,
    ConvNet: _conv_body,
    RecurrentNet: _recurrent_body,
    AttentionNet: _attention_body,
    ResNet50: _resnet50_body,
}


def build_keras(spec: ModelSpec, torch_module: nn.Module) -> keras.Model:
    """A Keras model computing the same function as `torch_module` (built from `spec`)."""
    inputs = keras.Input(shape=spec.served_input_shape, dtype=spec.dtype, name=INPUT_NAME)
    features = _BODIES[type(torch_module)](torch_module, inputs)
    head = torch_module.fc if isinstance(torch_module, ResNet50) else torch_module.head
    outputs = _apply(*_dense(head, OUTPUT_NAME), features)
    return keras.Model(inputs, outputs, name=spec.id)
