"""An independent NumPy forward pass of keras-hub's ``DINOV3Backbone``, and its presets written in keras-hub's layout.

Written from keras-hub 0.32's ``keras_hub/src/models/dinov3/``: ``dinov3_layers.py`` (``DINOV3Embedding``: class token,
then ``register_tokens``, no position table; ``DINOV3RopePositionEmbedding``: patch centres ``arange(0.5, n) / n``
per axis, rows first, ``2 c - 1``, ``inv_freq = 1 / rope_theta ** arange(0, 1, 4 / head_dim)``, angles ``2 pi c
inv_freq`` flattened ``[rows, cols]`` and tiled twice; ``DINOV3Attention._apply_rotary``: the patch tokens only,
``x cos + rotate_half(x) sin`` with ``rotate_half([x1, x2]) = [-x2, x1]``, scale ``head_dim ** -0.5``;
``DINOV3Layer``: ``norm1``, attention, ``layer_scale1``, ``norm2``, ``DINOV3MLP`` (``down(act(up x))``) or
``DINOV3GatedMLP`` (``down(act(gate x) * up x)``), ``layer_scale2``) and ``dinov3_backbone.py`` (the final
``layernorm``, every token returned). The h5 paths are those keras-hub's ``save_to_preset`` writes (checked by
``benchmarks/keras_hub_presets.py --family``). No keras_vit code; the files are written with h5py.
"""

import math
import os

import numpy as np

from reference import gelu, layer_norm, softmax
from reference_keras_hub import FLOAT32, _h5, _serialized

EMBED, BLOCK = "layers/dinov3_embedding", "layers/dinov3_encoder/layers/dinov3_layer"
ACTIVATIONS = {"gelu": gelu, "silu": lambda t: t / (1 + np.exp(-t))}


def config(**fields):
    """A tiny ``DINOV3Backbone`` config as keras-hub's ``get_config`` writes it (its defaults, then ``fields``)."""
    return {"name": "dinov3_backbone", "trainable": True, "dtype": FLOAT32, "patch_size": 8, "num_layers": 2, "hidden_dim": 32, "num_heads": 2,
            "intermediate_dim": 64, "num_register_tokens": 4, "use_mask_token": True, "layer_scale_init_value": 1.0,
            "hidden_activation": "gelu", "use_gated_mlp": False, "use_query_bias": True, "use_key_bias": True,
            "use_value_bias": True, "use_proj_bias": True, "use_mlp_bias": True, "attention_dropout": 0.0, "drop_path_rate": 0.0,
            "layer_norm_eps": 1e-05, "image_shape": [32, 32, 3], "rope_theta": 100.0, "apply_layernorm": False, **fields}


def block(i):
    return BLOCK + (f"_{i}" if i else "")


def weights(cfg, seed=0):
    """``{h5 path: array}`` of a random backbone of ``cfg`` (Keras ``Dense`` kernels ``(in, out)``)."""
    rng = np.random.default_rng(seed)
    r = lambda *shape, s=0.2: rng.normal(0, s, shape).astype("float32")  # noqa: E731
    d, p, inner = cfg["hidden_dim"], cfg["patch_size"], cfg["intermediate_dim"]
    w, i = {f"{EMBED}/vars/0": r(1, 1, d)}, 0
    if cfg["use_mask_token"]:
        i += 1
        w[f"{EMBED}/vars/{i}"] = r(1, 1, d)
    if cfg["num_register_tokens"]:
        w[f"{EMBED}/vars/{i + 1}"] = r(1, cfg["num_register_tokens"], d)
    w[f"{EMBED}/patch_embeddings/projection/vars/0"] = r(p, p, 3, d, s=0.05)
    w[f"{EMBED}/patch_embeddings/projection/vars/1"] = r(d)
    w["layers/layer_normalization/vars/0"], w["layers/layer_normalization/vars/1"] = 1 + r(d, s=0.1), r(d, s=0.1)

    def linear(group, n_in, n_out, bias):
        w[f"{group}/vars/0"] = r(n_in, n_out)
        if bias:
            w[f"{group}/vars/1"] = r(n_out)

    for b in range(cfg["num_layers"]):
        g = block(b)
        for norm in ("norm1", "norm2"):
            w[f"{g}/{norm}/vars/0"], w[f"{g}/{norm}/vars/1"] = 1 + r(d, s=0.1), r(d, s=0.1)
        for name, flag in (("query", "use_query_bias"), ("key", "use_key_bias"), ("value", "use_value_bias"), ("output", "use_proj_bias")):
            linear(f"{g}/attention/{name}_dense", d, d, cfg[flag])
        w[f"{g}/layer_scale1/vars/0"], w[f"{g}/layer_scale2/vars/0"] = 1 + r(d), 1 + r(d)
        for name in ("gate_proj", "up_proj") if cfg["use_gated_mlp"] else ("up_proj",):
            linear(f"{g}/mlp/{name}", d, inner, cfg["use_mlp_bias"])
        linear(f"{g}/mlp/down_proj", inner, d, cfg["use_mlp_bias"])
    return w


def rope(cfg, rows, cols):
    """``(cos, sin)`` ``(rows * cols, head_dim)`` of the patch tokens, as ``DINOV3RopePositionEmbedding.call``."""
    hd = cfg["hidden_dim"] // cfg["num_heads"]
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(hd // 4) * 4.0 / hd)
    h = np.repeat(((np.arange(rows) + 0.5) / rows)[:, None], cols, axis=1)
    v = np.repeat(((np.arange(cols) + 0.5) / cols)[None, :], rows, axis=0)
    coords = 2.0 * np.stack([h, v], axis=-1).reshape(-1, 2) - 1.0
    angles = (2 * math.pi * coords[:, :, None] * inv_freq[None, None, :]).reshape(len(coords), -1)
    angles = np.tile(angles, (1, 2))
    return np.cos(angles), np.sin(angles)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _dense(x, w, group):
    return x @ w[f"{group}/vars/0"] + w.get(f"{group}/vars/1", 0.0)


def forward(images, cfg, w, scale=None, offset=None):
    """keras-hub's backbone output (every token after the final norm) on ``[0, 255]`` images through the image
    converter's ``x * scale + offset``, at the images' own size (the RoPE grid follows it, as keras-hub's does)."""
    x = np.asarray(images, np.float64) * np.asarray(1.0 if scale is None else scale) + np.asarray(0.0 if offset is None else offset)
    d, heads, eps = cfg["hidden_dim"], cfg["num_heads"], cfg["layer_norm_eps"]
    hd, prefix = d // heads, 1 + cfg["num_register_tokens"]
    act = ACTIVATIONS[cfg["hidden_activation"]]
    kernel = w[f"{EMBED}/patch_embeddings/projection/vars/0"]
    p = kernel.shape[0]
    rows, cols = x.shape[1] // p, x.shape[2] // p  # Conv2D "valid": a remainder is dropped
    cos, sin = rope(cfg, rows, cols)
    last = max(int(k.rsplit("/", 1)[1]) for k in w if k.startswith(f"{EMBED}/vars/"))
    out = []
    for image in x:
        z = np.stack([np.einsum("hwc,hwcd->d", image[i * p:(i + 1) * p, j * p:(j + 1) * p], kernel)
                      for i in range(rows) for j in range(cols)]) + w[f"{EMBED}/patch_embeddings/projection/vars/1"]
        tokens = [w[f"{EMBED}/vars/0"][0]] + ([w[f"{EMBED}/vars/{last}"][0]] if cfg["num_register_tokens"] else [])
        z = np.concatenate(tokens + [z])
        for b in range(cfg["num_layers"]):
            g = block(b)
            y = layer_norm(z, w[f"{g}/norm1/vars/0"], w[f"{g}/norm1/vars/1"], eps)
            q, k, v = (_dense(y, w, f"{g}/attention/{n}_dense").reshape(len(y), heads, hd) for n in ("query", "key", "value"))
            for t in (q, k):
                t[prefix:] = t[prefix:] * cos[:, None] + _rotate_half(t[prefix:]) * sin[:, None]
            a = softmax(np.einsum("nhk,mhk->hnm", q, k) * hd ** -0.5)
            att = np.einsum("hnm,mhk->nhk", a, v).reshape(len(y), d)
            z = z + _dense(att, w, f"{g}/attention/output_dense") * w[f"{g}/layer_scale1/vars/0"]
            y = layer_norm(z, w[f"{g}/norm2/vars/0"], w[f"{g}/norm2/vars/1"], eps)
            if cfg["use_gated_mlp"]:
                y = act(_dense(y, w, f"{g}/mlp/gate_proj")) * _dense(y, w, f"{g}/mlp/up_proj")
            else:
                y = act(_dense(y, w, f"{g}/mlp/up_proj"))
            z = z + _dense(y, w, f"{g}/mlp/down_proj") * w[f"{g}/layer_scale2/vars/0"]
        out.append(layer_norm(z, w["layers/layer_normalization/vars/0"], w["layers/layer_normalization/vars/1"], eps))
    return np.stack(out).astype("float32")


def write_preset(folder, cfg, w, scale=None, offset=None):
    """A ``DINOV3Backbone`` preset folder as ``save_to_preset`` writes it, with a ``DINOV3ImageConverter`` (``scale``
    and ``offset`` given) beside it."""
    import json

    os.makedirs(folder, exist_ok=True)
    dump = lambda name, value: open(os.path.join(folder, name), "w").write(json.dumps(value, indent=4))  # noqa: E731
    dump("config.json", _serialized("DINOV3Backbone", "keras_hub.src.models.dinov3.dinov3_backbone", cfg))
    dump("metadata.json", {"keras_version": "3.15.1", "keras_hub_version": "0.32.0", "parameter_count": 0,
                           "date_saved": "2026-01-01@00:00:00", "tasks": []})
    _h5(os.path.join(folder, "model.weights.h5"), w, {"vars": "dinov3_backbone", f"{EMBED}/vars": "embeddings",
                                                      "layers/layer_normalization/vars": "layernorm"})
    if scale is not None:
        dump("image_converter.json", _serialized("DINOV3ImageConverter", "keras_hub.src.models.dinov3.dinov3_image_converter", {
            "name": "dinov3_image_converter", "image_size": list(cfg["image_shape"][:2]), "scale": scale, "offset": offset,
            "interpolation": "bilinear", "antialias": False, "crop_to_aspect_ratio": True, "pad_to_aspect_ratio": False}))
    return folder
