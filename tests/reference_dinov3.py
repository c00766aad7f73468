"""An independent NumPy forward pass of timm's DINOv3 (``Eva`` with ``rope_type='dinov3'``), and a writer of random
state dicts in its layout; no keras_vit code.

Written from timm 1.0.31: ``timm/models/eva.py`` (``vit_*_patch16_dinov3*`` registrations; ``Eva._pos_embed``: class
token, then the ``num_reg_tokens`` registers, no absolute table; ``EvaBlock`` with ``gamma_1`` / ``gamma_2`` and timm's
``SwiGLU`` when ``swiglu_mlp`` with ``swiglu_align_to``; ``EvaAttention``: fused ``qkv`` without bias, ``q_bias`` and
``v_bias`` with a zero key bias, the prefix tokens unrotated, ``apply_rot_embed_cat(half=True)``; ``forward_head``
with ``global_pool='avg'``: the mean of the patch tokens after the final norm), ``timm/layers/mlp.py`` (``SwiGLU``:
``silu(fc1_g x) * fc1_x x``, hidden rounded up to ``align_to``) and ``timm/layers/pos_embed_sincos.py``
(``RotaryEmbeddingDinoV3``: ``_build_grid(grid_type='centered', normalize_coords='separate')``, periods
``temperature ** (2 i / (hd / 2))``, angles ``2 pi c / period``, the ``[f, f]`` half layout; ``rope_rotate_half``).
Arrays are in torch's layout (``Linear.weight`` ``(out, in)``).
"""

import math

import numpy as np

from reference_timm import act, layer_norm, linear, patches, softmax

DEFAULTS = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0, init_values=1e-5, qkv_bias=False,
                swiglu_mlp=False, swiglu_align_to=0, num_reg_tokens=4, rope_temperature=100.0, rope_grid_indexing="ij",
                rope_grid_offset=0.0, img_size=256, norm_eps=1e-5, global_pool="avg", num_classes=0)


def full_args(args):
    args = {**DEFAULTS, **args}
    size = args["img_size"]
    args["img_size"] = (size, size) if isinstance(size, int) else tuple(size)
    return args


def coordinates(feat_shape, indexing, offset):
    """``(N, 2)``: timm's centred grid, ``2 (i + 0.5 + offset) / size - 1`` per axis, row-major over (H, W)."""
    shape = list(feat_shape)
    if indexing == "xy":
        shape = [shape[1], shape[0]]
    t = [(np.arange(0.5, s, dtype=np.float64) + offset) / s for s in shape]
    g = np.stack(np.meshgrid(*t, indexing=indexing), axis=-1)
    return (2.0 * g - 1.0).reshape(-1, 2)


def rope_embedding(args, feat_shape):
    """``(sin, cos)`` ``(N, hd)`` in the half layout ``[f0 .. f_{hd/2-1}, f0 .. f_{hd/2-1}]``."""
    hd = args["embed_dim"] // args["num_heads"]
    periods = args["rope_temperature"] ** (2.0 * np.arange(hd // 4, dtype=np.float64) / (hd // 2))
    g = coordinates(feat_shape, args["rope_grid_indexing"], args["rope_grid_offset"])
    angles = (2 * math.pi * g[:, :, None] / periods[None, None, :]).reshape(len(g), -1)  # (N, hd / 2)
    return np.concatenate([np.sin(angles)] * 2, -1), np.concatenate([np.cos(angles)] * 2, -1)


def rotate_half(x):
    """timm's ``rope_rotate_half``: ``[x1, x2] -> [-x2, x1]``."""
    first, second = np.split(x, 2, axis=-1)
    return np.concatenate([-second, first], axis=-1)


def attention(x, sd, name, heads, emb, prefix):
    y = x @ sd[name + ".qkv.weight"].T
    if name + ".q_bias" in sd:
        y = y + np.concatenate([sd[name + ".q_bias"], np.zeros_like(sd[name + ".q_bias"]), sd[name + ".v_bias"]])
    q, k, v = np.split(y, 3, axis=-1)
    hd = q.shape[-1] // heads
    sin, cos = emb
    out = []
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        qh, kh = q[:, s].copy(), k[:, s].copy()
        qh[prefix:] = qh[prefix:] * cos + rotate_half(qh[prefix:]) * sin
        kh[prefix:] = kh[prefix:] * cos + rotate_half(kh[prefix:]) * sin
        out.append(softmax(qh @ kh.T / math.sqrt(hd)) @ v[:, s])
    return linear(np.concatenate(out, axis=-1), sd, name + ".proj")


def mlp(x, sd, name):
    if name + ".fc1_g.weight" in sd:  # timm's SwiGLU
        return linear(act(linear(x, sd, name + ".fc1_g"), "silu") * linear(x, sd, name + ".fc1_x"), sd, name + ".fc2")
    return linear(act(linear(x, sd, name + ".fc1"), "gelu"), sd, name + ".fc2")


def forward(image, sd, args, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
    """The output of one image (H, W, 3) of [0, 255] pixels: logits, or the pooled features without a head."""
    args = full_args(args)
    p = args["patch_size"]
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    feat = (x.shape[0] // p, x.shape[1] // p)
    x = patches(x, sd, p)
    prefix = [sd["cls_token"][0]] + ([sd["reg_token"][0]] if args["num_reg_tokens"] else [])
    x = np.concatenate(prefix + [x])
    npt = 1 + args["num_reg_tokens"]
    emb = rope_embedding(args, feat)
    eps = args["norm_eps"]
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        x = x + sd[b + ".gamma_1"] * attention(layer_norm(x, sd, b + ".norm1", eps), sd, b + ".attn", args["num_heads"], emb, npt)
        x = x + sd[b + ".gamma_2"] * mlp(layer_norm(x, sd, b + ".norm2", eps), sd, b + ".mlp")
    x = layer_norm(x, sd, "norm", eps)
    x = x[npt:].mean(0) if args["global_pool"] == "avg" else x[0]
    return linear(x, sd, "head") if args["num_classes"] else x


def state_dict(args, seed=0, scale=0.2):
    """Random float32 weights of the DINOv3 ``args`` describes, named and shaped as timm's ``Eva`` saves them."""
    args = full_args(args)
    rng = np.random.default_rng(seed)
    d, p, depth = args["embed_dim"], args["patch_size"], args["depth"]
    hidden = int(d * args["mlp_ratio"])
    if args["swiglu_mlp"] and args["swiglu_align_to"]:
        hidden += -hidden % args["swiglu_align_to"]
    shapes = {"cls_token": (1, 1, d), "patch_embed.proj.weight": (d, 3, p, p), "patch_embed.proj.bias": (d,)}
    if args["num_reg_tokens"]:
        shapes["reg_token"] = (1, args["num_reg_tokens"], d)
    if args["num_classes"]:
        shapes.update({"head.weight": (args["num_classes"], d), "head.bias": (args["num_classes"],)})
    norms = ["norm"]
    for i in range(depth):
        b = f"blocks.{i}"
        norms += [f"{b}.norm1", f"{b}.norm2"]
        shapes.update({f"{b}.attn.qkv.weight": (3 * d, d), f"{b}.attn.proj.weight": (d, d), f"{b}.attn.proj.bias": (d,),
                       f"{b}.mlp.fc2.weight": (d, hidden), f"{b}.mlp.fc2.bias": (d,)})
        if args["qkv_bias"]:
            shapes.update({f"{b}.attn.q_bias": (d,), f"{b}.attn.v_bias": (d,)})
        fc1 = ("fc1_g", "fc1_x") if args["swiglu_mlp"] else ("fc1",)
        for name in fc1:
            shapes.update({f"{b}.mlp.{name}.weight": (hidden, d), f"{b}.mlp.{name}.bias": (hidden,)})
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    for i in range(depth):  # LayerScale around 1: the branches count
        sd[f"blocks.{i}.gamma_1"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[f"blocks.{i}.gamma_2"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
    for name in norms:
        sd[name + ".weight"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(d) * scale).astype("float32")
    return sd
