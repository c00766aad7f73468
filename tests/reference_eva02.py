"""An independent NumPy forward pass of timm's EVA-02 (``eva02_{tiny,small,base,large}_patch14_*``, the CLIP towers
``eva02_{base,large}_patch1*_clip_*``) and EVA-01 (``eva_giant_patch14_*``), and a writer of random state dicts in its
layout; no keras_vit code.

Written from timm 1.0.31: ``timm/models/eva.py`` (``Eva`` with its defaults ``attn_type='eva'``, ``qkv_fused=True``,
``qkv_bias=True``, ``use_abs_pos_emb=True``, ``no_embed_class=False``: the table covers the class token;
``init_values=None``: no LayerScale; ``global_pool='avg'`` with ``fc_norm`` and no final ``norm``, ``'token'`` (the
CLIP towers) with the final ``norm`` and no ``fc_norm``; ``swiglu_mlp=True`` without ``scale_mlp`` (Ti / S):
``GluMlp(hidden * 2, act_layer=SiLU, gate_last=False)``, ``silu(x1) * x2`` of the packed ``fc1``'s halves; with
``scale_mlp`` (B / L): ``SwiGLU(norm_layer=LayerNorm)``, ``fc2(norm(silu(fc1_g x) * fc1_x x))``; ``swiglu_mlp=False``
(EVA-01): ``Mlp``, ``fc2(gelu(fc1 x))``; ``use_post_norm=True`` (EVA-02-CLIP-E, ``EvaBlockPostNorm``):
``x + norm1(attn(x))``, ``x + norm2(mlp(x))``; ``use_rot_pos_emb=True``, ``ref_feat_shape=(16, 16)``), ``EvaAttention``
(``qkv_fused=True``: ``qkv`` without bias, ``q_bias``, a zero ``k_bias``, ``v_bias``; ``qkv_fused=False`` (B / L):
``q_proj`` and ``v_proj`` with biases, ``k_proj`` without; the class token unrotated, ``apply_rot_embed_cat`` with
``half=False``; ``scale_norm=scale_attn_inner``: ``proj(norm(x))`` of the joined heads),
``timm/layers/pos_embed_sincos.py`` (``RotaryEmbeddingCat`` with ``in_pixels=False``: ``freq_bands``
``temperature ** -(i / (dim / 4))``, ``_build_grid(grid_type='index')`` with ``t / feat_shape * ref_feat_shape``,
``build_rotary_pos_embed``'s ``repeat_interleave(2)``). Arrays are in torch's layout (``Linear.weight`` ``(out, in)``).
"""

import math

import numpy as np

from reference_rope import rot
from reference_timm import act, layer_norm, linear, patches, softmax

DEFAULTS = dict(patch_size=14, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4 * 2 / 3, ref_feat_shape=(16, 16),
                rope_temperature=10000.0, rope_grid_indexing="ij", img_size=224, num_classes=0, qkv_fused=True,
                swiglu_mlp=True, scale_mlp=False, scale_attn_inner=False, use_rot_pos_emb=True, global_pool="avg",
                use_post_norm=False)


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


def attention(x, sd, name, args, emb):
    heads = args["num_heads"]
    if args["qkv_fused"]:
        bias = np.concatenate([sd[name + ".q_bias"], np.zeros_like(sd[name + ".q_bias"]), sd[name + ".v_bias"]])
        q, k, v = np.split(x @ sd[name + ".qkv.weight"].T + bias, 3, axis=-1)
    else:  # nn.Linear(bias=qkv_bias) for q and v, nn.Linear(bias=False) for k
        q, k, v = linear(x, sd, name + ".q_proj"), x @ sd[name + ".k_proj.weight"].T, linear(x, sd, name + ".v_proj")
    hd = q.shape[-1] // heads
    out = []
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        qh, kh = q[:, s].copy(), k[:, s].copy()
        if emb is not None:
            sin, cos = emb
            qh[1:] = qh[1:] * cos + rot(qh[1:]) * sin
            kh[1:] = kh[1:] * cos + rot(kh[1:]) * sin
        out.append(softmax(qh @ kh.T / math.sqrt(hd)) @ v[:, s])
    out = np.concatenate(out, axis=-1)
    if args["scale_attn_inner"]:
        out = layer_norm(out, sd, name + ".norm", 1e-6)
    return linear(out, sd, name + ".proj")


def mlp(x, sd, name, args):
    if not args["swiglu_mlp"]:
        return linear(act(linear(x, sd, name + ".fc1"), "gelu"), sd, name + ".fc2")
    if args["scale_mlp"]:  # SwiGLU: separate fc1_g / fc1_x, the norm before fc2
        gate, value = linear(x, sd, name + ".fc1_g"), linear(x, sd, name + ".fc1_x")
        return linear(layer_norm(act(gate, "silu") * value, sd, name + ".norm", 1e-6), sd, name + ".fc2")
    gate, value = np.split(linear(x, sd, name + ".fc1"), 2, axis=-1)
    return linear(act(gate, "silu") * value, sd, name + ".fc2")


def forward(image, sd, args, mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711)):
    """Pooled features (``num_classes=0``) or logits of one image (H, W, 3) of [0, 255] pixels."""
    args = full_args(args)
    p = args["patch_size"]
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    feat = (x.shape[0] // p, x.shape[1] // p)
    x = np.concatenate([sd["cls_token"][0], patches(x, sd, p)]) + sd["pos_embed"][0]
    emb = rope_embedding(args, feat) if args["use_rot_pos_emb"] else None
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        if args["use_post_norm"]:  # EvaBlockPostNorm.forward
            x = x + layer_norm(attention(x, sd, b + ".attn", args, emb), sd, b + ".norm1", 1e-6)
            x = x + layer_norm(mlp(x, sd, b + ".mlp", args), sd, b + ".norm2", 1e-6)
            continue
        x = x + attention(layer_norm(x, sd, b + ".norm1", 1e-6), sd, b + ".attn", args, emb)
        x = x + mlp(layer_norm(x, sd, b + ".norm2", 1e-6), sd, b + ".mlp", args)
    if args["global_pool"] == "token":  # the final norm, the class token
        x = layer_norm(x, sd, "norm", 1e-6)[0]
    else:
        x = layer_norm(x[1:].mean(axis=0), sd, "fc_norm", 1e-6)
    return linear(x, sd, "head") if args["num_classes"] else x


def state_dict(args, seed=0, scale=0.2):
    """Random float32 weights of the EVA-02 / EVA-01 ``args`` describes, named and shaped as timm's ``Eva`` saves them
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
    norms = {"norm" if args["global_pool"] == "token" else "fc_norm": d}
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        norms.update({f"{b}.norm1": d, f"{b}.norm2": d})
        shapes.update({f"{b}.attn.proj.weight": (d, d), f"{b}.attn.proj.bias": (d,), f"{b}.mlp.fc2.weight": (d, hidden),
                       f"{b}.mlp.fc2.bias": (d,)})
        if args["qkv_fused"]:
            shapes.update({f"{b}.attn.qkv.weight": (3 * d, d), f"{b}.attn.q_bias": (d,), f"{b}.attn.v_bias": (d,)})
        else:
            shapes.update({f"{b}.attn.{n}_proj.weight": (d, d) for n in "qkv"})
            shapes.update({f"{b}.attn.q_proj.bias": (d,), f"{b}.attn.v_proj.bias": (d,)})
        if args["scale_attn_inner"]:
            norms[f"{b}.attn.norm"] = d
        if not args["swiglu_mlp"]:
            shapes.update({f"{b}.mlp.fc1.weight": (hidden, d), f"{b}.mlp.fc1.bias": (hidden,)})
        elif args["scale_mlp"]:
            shapes.update({f"{b}.mlp.fc1_{n}.{w}": (hidden, d)[:1 if w == "bias" else 2] for n in "gx" for w in ("weight", "bias")})
            norms[f"{b}.mlp.norm"] = hidden
        else:
            shapes.update({f"{b}.mlp.fc1.weight": (2 * hidden, d), f"{b}.mlp.fc1.bias": (2 * hidden,)})
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    for name, width in norms.items():
        sd[name + ".weight"] = (1.0 + rng.standard_normal(width) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(width) * scale).astype("float32")
    return sd
