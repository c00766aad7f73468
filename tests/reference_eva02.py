"""An independent NumPy forward pass of timm's EVA-02 Ti / S (``eva02_{tiny,small}_patch14_{224,336}``), and a writer of
random state dicts in its layout; no keras_vit code.

Written from timm 1.0.31: ``timm/models/eva.py`` (``Eva`` with its defaults ``attn_type='eva'``, ``qkv_fused=True``,
``qkv_bias=True``, ``use_abs_pos_emb=True``, ``no_embed_class=False``: the table covers the class token;
``init_values=None``: no LayerScale; ``global_pool='avg'`` with ``fc_norm`` and no final ``norm``; the registrations' ``swiglu_mlp=True``
without ``scale_mlp``: ``GluMlp(hidden * 2, act_layer=SiLU, gate_last=False)``, ``silu(x1) * x2`` of the packed
``fc1``'s halves; ``use_rot_pos_emb=True``, ``ref_feat_shape=(16, 16)``), ``EvaAttention`` (``qkv`` without bias,
``q_bias``, a zero ``k_bias``, ``v_bias``; the class token unrotated, ``apply_rot_embed_cat`` with ``half=False``),
``timm/layers/pos_embed_sincos.py`` (``RotaryEmbeddingCat`` with ``in_pixels=False``: ``freq_bands``
``temperature ** -(i / (dim / 4))``, ``_build_grid(grid_type='index')`` with ``t / feat_shape * ref_feat_shape``,
``build_rotary_pos_embed``'s ``repeat_interleave(2)``). Arrays are in torch's layout (``Linear.weight`` ``(out, in)``).
"""

import math

import numpy as np

from reference_rope import rot
from reference_timm import layer_norm, linear, patches, softmax

DEFAULTS = dict(patch_size=14, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4 * 2 / 3, ref_feat_shape=(16, 16),
                rope_temperature=10000.0, rope_grid_indexing="ij", img_size=224, num_classes=0)


def full_args(args):
    args = {**DEFAULTS, **args}
    size = args["img_size"]
    args["img_size"] = (size, size) if isinstance(size, int) else tuple(size)
    return args


def rope_embedding(args, feat_shape):
    """``(sin, cos)`` ``(N, hd)`` in timm's interleaved layout, on the grid scaled to ``ref_feat_shape``."""
    hd = args["embed_dim"] // args["num_heads"]
    shape, ref = list(feat_shape), list(args["ref_feat_shape"])
    if args["rope_grid_indexing"] == "xy":
        shape, ref = shape[::-1], ref[::-1]
    t = [np.arange(s, dtype=np.float64) / s * r for s, r in zip(shape, ref)]
    g = np.stack(np.meshgrid(*t, indexing=args["rope_grid_indexing"]), axis=-1).reshape(-1, 2)
    bands = args["rope_temperature"] ** -(np.arange(hd // 4, dtype=np.float64) / (hd // 4))
    pos = (g[:, :, None] * bands).reshape(len(g), -1)
    return np.repeat(np.sin(pos), 2, -1), np.repeat(np.cos(pos), 2, -1)


def attention(x, sd, name, heads, emb):
    bias = np.concatenate([sd[name + ".q_bias"], np.zeros_like(sd[name + ".q_bias"]), sd[name + ".v_bias"]])
    q, k, v = np.split(x @ sd[name + ".qkv.weight"].T + bias, 3, axis=-1)
    hd = q.shape[-1] // heads
    sin, cos = emb
    out = []
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        qh, kh = q[:, s].copy(), k[:, s].copy()
        qh[1:] = qh[1:] * cos + rot(qh[1:]) * sin
        kh[1:] = kh[1:] * cos + rot(kh[1:]) * sin
        out.append(softmax(qh @ kh.T / math.sqrt(hd)) @ v[:, s])
    return linear(np.concatenate(out, axis=-1), sd, name + ".proj")


def forward(image, sd, args, mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711)):
    """Pooled features (``num_classes=0``) or logits of one image (H, W, 3) of [0, 255] pixels."""
    args = full_args(args)
    p = args["patch_size"]
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    feat = (x.shape[0] // p, x.shape[1] // p)
    x = np.concatenate([sd["cls_token"][0], patches(x, sd, p)]) + sd["pos_embed"][0]
    emb = rope_embedding(args, feat)
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        x = x + attention(layer_norm(x, sd, b + ".norm1", 1e-6), sd, b + ".attn", args["num_heads"], emb)
        h = linear(layer_norm(x, sd, b + ".norm2", 1e-6), sd, b + ".mlp.fc1")
        gate, value = np.split(h, 2, axis=-1)
        x = x + linear(gate / (1.0 + np.exp(-gate)) * value, sd, b + ".mlp.fc2")
    x = layer_norm(x[1:].mean(axis=0), sd, "fc_norm", 1e-6)
    return linear(x, sd, "head") if args["num_classes"] else x


def state_dict(args, seed=0, scale=0.2):
    """Random float32 weights of the EVA-02 Ti / S ``args`` describes, named and shaped as timm's ``Eva`` saves them
    (``pos_embed`` of ``img_size``'s grid plus the class token)."""
    args = full_args(args)
    rng = np.random.default_rng(seed)
    d, p = args["embed_dim"], args["patch_size"]
    hidden = int(d * args["mlp_ratio"])
    n = (args["img_size"][0] // p) * (args["img_size"][1] // p)
    shapes = {"cls_token": (1, 1, d), "pos_embed": (1, n + 1, d), "patch_embed.proj.weight": (d, 3, p, p),
              "patch_embed.proj.bias": (d,)}
    if args["num_classes"]:
        shapes.update({"head.weight": (args["num_classes"], d), "head.bias": (args["num_classes"],)})
    norms = ["fc_norm"]
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        norms += [f"{b}.norm1", f"{b}.norm2"]
        shapes.update({f"{b}.attn.qkv.weight": (3 * d, d), f"{b}.attn.q_bias": (d,), f"{b}.attn.v_bias": (d,),
                       f"{b}.attn.proj.weight": (d, d), f"{b}.attn.proj.bias": (d,),
                       f"{b}.mlp.fc1.weight": (2 * hidden, d), f"{b}.mlp.fc1.bias": (2 * hidden,),
                       f"{b}.mlp.fc2.weight": (d, hidden), f"{b}.mlp.fc2.bias": (d,)})
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    for name in norms:
        sd[name + ".weight"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(d) * scale).astype("float32")
    return sd
