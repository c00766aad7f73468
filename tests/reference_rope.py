"""An independent NumPy forward pass of timm's RoPE-ViT (``Eva`` with ``attn_type='rope'``, ``use_rot_pos_emb=True``),
and a writer of random state dicts in its layout; no keras_vit code.

Written from timm 1.0.31: ``timm/models/eva.py`` (``Eva._pos_embed``, ``forward_features`` with ``rot_pos_embed[i]``
per block for ``rope_mixed``, ``EvaBlock`` with ``gamma_1`` / ``gamma_2``), ``timm/layers/attention.py``
(``AttentionRope``: the prefix tokens kept, ``apply_rot_embed_cat`` on the rest of q and k) and
``timm/layers/pos_embed_sincos.py`` (``freq_bands``, ``_build_grid``, ``build_rotary_pos_embed`` with its
interleaved ``repeat_interleave(2)`` layout, ``rot``, ``apply_rot_embed``; ``RotaryEmbeddingMixed.get_embed``,
``get_mixed_freqs``). Arrays are in torch's layout (``Linear.weight`` ``(out, in)``). ``args`` are the Eva
registration's names: ``patch_size, embed_dim, depth, num_heads, mlp_ratio, init_values, no_embed_class,
use_abs_pos_emb, rope_type ('cat' | 'mixed'), rope_temperature, rope_grid_indexing, rope_grid_offset, img_size
(int or (H, W)), num_classes``; the class token and token pooling of the RoPE-ViT registrations.
"""

import math

import numpy as np

from reference_timm import layer_norm, linear, mlp, patches, softmax

DEFAULTS = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0, init_values=1e-5, no_embed_class=False,
                use_abs_pos_emb=False, rope_type="cat", rope_temperature=100.0, rope_grid_indexing="xy",
                rope_grid_offset=0.0, img_size=224, num_classes=1000)


def full_args(args):
    args = {**DEFAULTS, **args}
    size = args["img_size"]
    args["img_size"] = (size, size) if isinstance(size, int) else tuple(size)
    return args


def grid(feat_shape, indexing, offset):
    """timm's ``_build_grid(grid_type='index')``: ``(N, 2)`` coordinates, row-major over ``feat_shape`` (H, W)."""
    shape = list(feat_shape)
    if indexing == "xy":
        shape = [shape[1], shape[0]]
    t = [np.arange(s, dtype=np.float64) + offset for s in shape]
    g = np.stack(np.meshgrid(*t, indexing=indexing), axis=-1)  # (H, W, 2) in both indexings
    return g.reshape(-1, 2)


def rope_embeddings(sd, args, feat_shape):
    """``[(sin, cos)]`` per block, each ``(N, hd)`` (axial) or ``(heads, N, hd)`` (mixed), interleaved layout."""
    hd = args["embed_dim"] // args["num_heads"]
    if args["rope_type"] == "mixed":
        g = grid(feat_shape, args["rope_grid_indexing"], 0.0)
        freqs = sd["rope.freqs"].astype(np.float64)  # (2, depth, heads, hd / 2)
        angles = g[:, 0][None, None, :, None] * freqs[0][:, :, None, :] + g[:, 1][None, None, :, None] * freqs[1][:, :, None, :]
        return [(np.repeat(np.sin(a), 2, -1), np.repeat(np.cos(a), 2, -1)) for a in angles]
    bands = 1.0 / args["rope_temperature"] ** (np.arange(hd // 4, dtype=np.float64) / (hd // 4))
    g = grid(feat_shape, args["rope_grid_indexing"], args["rope_grid_offset"])
    pos = (g[:, :, None] * bands).reshape(len(g), -1)  # (N, 2 * hd / 4): [c0 * bands, c1 * bands]
    emb = (np.repeat(np.sin(pos), 2, -1), np.repeat(np.cos(pos), 2, -1))
    return [emb] * args["depth"]


def rot(x):
    """timm's ``rot``: ``[x0, x1, x2, x3] -> [-x1, x0, -x3, x2]``."""
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
    return out


def attention(x, sd, name, heads, emb, prefix):
    q, k, v = np.split(linear(x, sd, name + ".qkv"), 3, axis=-1)
    hd = q.shape[-1] // heads
    sin, cos = emb
    out = []
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        qh, kh = q[:, s].copy(), k[:, s].copy()
        sh, ch = (sin[h], cos[h]) if sin.ndim == 3 else (sin, cos)
        qh[prefix:] = qh[prefix:] * ch + rot(qh[prefix:]) * sh
        kh[prefix:] = kh[prefix:] * ch + rot(kh[prefix:]) * sh
        out.append(softmax(qh @ kh.T / math.sqrt(hd)) @ v[:, s])
    return linear(np.concatenate(out, axis=-1), sd, name + ".proj")


def forward(image, sd, args, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
    """Logits of one image (H, W, 3) of [0, 255] pixels."""
    args = full_args(args)
    p = args["patch_size"]
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    feat = (x.shape[0] // p, x.shape[1] // p)
    x = patches(x, sd, p)
    cls = sd["cls_token"][0]
    if args["use_abs_pos_emb"] and args["no_embed_class"]:
        x = np.concatenate([cls, x + sd["pos_embed"][0]])
    elif args["use_abs_pos_emb"]:
        x = np.concatenate([cls, x]) + sd["pos_embed"][0]
    else:
        x = np.concatenate([cls, x])
    ropes = rope_embeddings(sd, args, feat)
    eps = 1e-6
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        y = attention(layer_norm(x, sd, b + ".norm1", eps), sd, b + ".attn", args["num_heads"], ropes[i], 1)
        x = x + sd[b + ".gamma_1"] * y
        y = mlp(layer_norm(x, sd, b + ".norm2", eps), sd, b + ".mlp", {"mlp_layer": "mlp", "act_layer": "gelu"})
        x = x + sd[b + ".gamma_2"] * y
    x = layer_norm(x, sd, "norm", eps)[0]
    return linear(x, sd, "head")


def state_dict(args, seed=0, scale=0.2):
    """Random float32 weights of the RoPE-ViT ``args`` describes, named and shaped as timm's ``Eva`` saves them."""
    args = full_args(args)
    rng = np.random.default_rng(seed)
    d, p, depth, heads = args["embed_dim"], args["patch_size"], args["depth"], args["num_heads"]
    hidden = int(d * args["mlp_ratio"])
    n = (args["img_size"][0] // p) * (args["img_size"][1] // p)
    shapes = {"cls_token": (1, 1, d), "patch_embed.proj.weight": (d, 3, p, p), "patch_embed.proj.bias": (d,),
              "head.weight": (args["num_classes"], d), "head.bias": (args["num_classes"],)}
    if args["use_abs_pos_emb"]:
        shapes["pos_embed"] = (1, n + (0 if args["no_embed_class"] else 1), d)
    norms = ["norm"]
    for i in range(depth):
        b = f"blocks.{i}"
        norms += [f"{b}.norm1", f"{b}.norm2"]
        shapes.update({f"{b}.attn.qkv.weight": (3 * d, d), f"{b}.attn.qkv.bias": (3 * d,), f"{b}.attn.proj.weight": (d, d),
                       f"{b}.attn.proj.bias": (d,), f"{b}.mlp.fc1.weight": (hidden, d), f"{b}.mlp.fc1.bias": (hidden,),
                       f"{b}.mlp.fc2.weight": (d, hidden), f"{b}.mlp.fc2.bias": (d,)})
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    for i in range(depth):  # LayerScale around 1: the branches count
        sd[f"blocks.{i}.gamma_1"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[f"blocks.{i}.gamma_2"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
    if args["rope_type"] == "mixed":  # frequencies of several octaves, so that every angle turns
        sd["rope.freqs"] = (rng.standard_normal((2, depth, heads, d // heads // 2)) * 0.8).astype("float32")
    for name in norms:
        sd[name + ".weight"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(d) * scale).astype("float32")
    return sd
