"""An independent NumPy forward pass of timm's Perception Encoder (``vit_pe_{core,lang,spatial}_*``), and a writer of
random state dicts in its layout; no keras_vit code.

Written from timm 1.0.31: ``timm/models/eva.py`` (``Eva`` with the PE registrations' ``attn_type='rope'``,
``use_pre_transformer_norm=True``: ``PatchEmbed(bias=False)`` and ``norm_pre`` after the class token and the
absolute table, ``use_abs_pos_emb=True`` (Eva's default; the table covers the class token), ``use_rot_pos_emb=True``
with ``rope_type='cat'`` (Eva's default), ``ref_feat_shape``, ``rope_grid_offset``, ``rope_grid_indexing='xy'`` and
``rope_temperature`` 10000 (Eva's default), ``init_values`` (``gamma_1`` / ``gamma_2``) or none; the core models'
``global_pool='map'`` with the final ``norm`` then ``AttentionPoolLatent(num_heads=attn_pool_num_heads,
mlp_ratio=attn_pool_mlp_ratio, norm_layer, act_layer=nn.GELU)`` and ``head``; the lang / spatial models'
``global_pool='avg'`` (the mean of the patch tokens, ``global_pool_nlc``) with ``use_post_transformer_norm=False``
and ``use_fc_norm=False``: no norm after the blocks), ``timm/layers/attention.py`` (``AttentionRope``: the prefix
tokens unrotated, ``apply_rot_embed_cat`` with ``half=False``), ``timm/layers/attention_pool.py``
(``AttentionPoolLatent``: ``q`` of the latent, ``kv`` of every token, ``proj``, ``x + mlp(norm(x))``, token 0) and
``timm/layers/pos_embed_sincos.py`` (``RotaryEmbeddingCat`` with ``in_pixels=False``: ``freq_bands`` ``temperature **
-(i / (dim / 4))``, ``_build_grid(grid_type='index')``: ``(t + grid_offset) / feat_shape * ref_feat_shape``, axes
swapped for ``'xy'``; ``repeat_interleave(2)``). Arrays are in torch's layout (``Linear.weight`` ``(out, in)``).
"""

import math

import numpy as np

from reference_rope import rot
from reference_timm import heads_attention, layer_norm, linear, mlp, patches, softmax

EPS = 1e-5  # the registrations' norm_layer=partial(LayerNorm, eps=1e-5), attention pooling's too
DEFAULTS = dict(patch_size=16, embed_dim=192, depth=12, num_heads=3, mlp_ratio=4.0, class_token=True, init_values=None,
                global_pool="map", attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0, ref_feat_shape=(24, 24),
                rope_grid_offset=1.0, rope_grid_indexing="xy", rope_temperature=10000.0, img_size=384, num_classes=0)


def full_args(args):
    args = {**DEFAULTS, **args}
    size = args["img_size"]
    args["img_size"] = (size, size) if isinstance(size, int) else tuple(size)
    return args


def rope_embedding(args, feat_shape):
    """``(sin, cos)`` ``(N, hd)`` in timm's interleaved layout, on the offset grid scaled to ``ref_feat_shape``."""
    hd = args["embed_dim"] // args["num_heads"]
    shape, ref = list(feat_shape), list(args["ref_feat_shape"])
    if args["rope_grid_indexing"] == "xy":
        shape, ref = shape[::-1], ref[::-1]
    t = [(np.arange(s, dtype=np.float64) + args["rope_grid_offset"]) / s * r for s, r in zip(shape, ref)]
    g = np.stack(np.meshgrid(*t, indexing=args["rope_grid_indexing"]), axis=-1).reshape(-1, 2)
    bands = args["rope_temperature"] ** -(np.arange(hd // 4, dtype=np.float64) / (hd // 4))
    pos = (g[:, :, None] * bands).reshape(len(g), -1)
    return np.repeat(np.sin(pos), 2, -1), np.repeat(np.cos(pos), 2, -1)


def attention(x, sd, name, heads, emb, prefix):
    q, k, v = np.split(linear(x, sd, name + ".qkv"), 3, axis=-1)
    hd = q.shape[-1] // heads
    sin, cos = emb
    out = []
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        qh, kh = q[:, s].copy(), k[:, s].copy()
        qh[prefix:] = qh[prefix:] * cos + rot(qh[prefix:]) * sin
        kh[prefix:] = kh[prefix:] * cos + rot(kh[prefix:]) * sin
        out.append(softmax(qh @ kh.T / math.sqrt(hd)) @ v[:, s])
    return linear(np.concatenate(out, axis=-1), sd, name + ".proj")


def forward(image, sd, args, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """Pooled features (``num_classes=0``) or the head's output of one image (H, W, 3) of [0, 255] pixels."""
    args = full_args(args)
    p, prefix = args["patch_size"], int(args["class_token"])
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    feat = (x.shape[0] // p, x.shape[1] // p)
    x = patches(x, sd, p)
    if prefix:
        x = np.concatenate([sd["cls_token"][0], x])
    x = layer_norm(x + sd["pos_embed"][0], sd, "norm_pre", EPS)
    emb = rope_embedding(args, feat)
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        y = attention(layer_norm(x, sd, b + ".norm1", EPS), sd, b + ".attn", args["num_heads"], emb, prefix)
        x = x + (sd[b + ".gamma_1"] * y if b + ".gamma_1" in sd else y)
        y = mlp(layer_norm(x, sd, b + ".norm2", EPS), sd, b + ".mlp", {"mlp_layer": "mlp", "act_layer": "gelu"})
        x = x + (sd[b + ".gamma_2"] * y if b + ".gamma_2" in sd else y)
    if args["global_pool"] == "map":
        x = layer_norm(x, sd, "norm", EPS)
        q = linear(sd["attn_pool.latent"][0], sd, "attn_pool.q")
        k, v = np.split(linear(x, sd, "attn_pool.kv"), 2, axis=-1)
        y = linear(heads_attention(q, k, v, args["attn_pool_num_heads"]), sd, "attn_pool.proj")
        x = (y + mlp(layer_norm(y, sd, "attn_pool.norm", EPS), sd, "attn_pool.mlp", {"mlp_layer": "mlp", "act_layer": "gelu"}))[0]
    else:  # 'avg' over the patch tokens, no norm after the blocks
        x = x[prefix:].mean(axis=0)
    return linear(x, sd, "head") if args["num_classes"] else x


def state_dict(args, seed=0, scale=0.2):
    """Random float32 weights of the PE model ``args`` describes, named and shaped as timm's ``Eva`` saves them
    (``head.bias`` all zeros, as timm's ``_convert_pe`` writes PE's bias-free ``proj``)."""
    args = full_args(args)
    rng = np.random.default_rng(seed)
    d, p = args["embed_dim"], args["patch_size"]
    hidden, pool_hidden = int(d * args["mlp_ratio"]), int(d * args["attn_pool_mlp_ratio"])
    prefix = int(args["class_token"])
    n = (args["img_size"][0] // p) * (args["img_size"][1] // p)
    shapes = {"pos_embed": (1, n + prefix, d), "patch_embed.proj.weight": (d, 3, p, p)}
    if prefix:
        shapes["cls_token"] = (1, 1, d)
    norms = ["norm_pre"]
    for i in range(args["depth"]):
        b = f"blocks.{i}"
        norms += [f"{b}.norm1", f"{b}.norm2"]
        shapes.update({f"{b}.attn.qkv.weight": (3 * d, d), f"{b}.attn.qkv.bias": (3 * d,), f"{b}.attn.proj.weight": (d, d),
                       f"{b}.attn.proj.bias": (d,), f"{b}.mlp.fc1.weight": (hidden, d), f"{b}.mlp.fc1.bias": (hidden,),
                       f"{b}.mlp.fc2.weight": (d, hidden), f"{b}.mlp.fc2.bias": (d,)})
    if args["global_pool"] == "map":
        norms += ["norm", "attn_pool.norm"]
        shapes.update({"attn_pool.latent": (1, 1, d), "attn_pool.q.weight": (d, d), "attn_pool.q.bias": (d,),
                       "attn_pool.kv.weight": (2 * d, d), "attn_pool.kv.bias": (2 * d,), "attn_pool.proj.weight": (d, d),
                       "attn_pool.proj.bias": (d,), "attn_pool.mlp.fc1.weight": (pool_hidden, d),
                       "attn_pool.mlp.fc1.bias": (pool_hidden,), "attn_pool.mlp.fc2.weight": (d, pool_hidden),
                       "attn_pool.mlp.fc2.bias": (d,)})
    if args["num_classes"]:
        shapes["head.weight"] = (args["num_classes"], d)
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    if args["num_classes"]:
        sd["head.bias"] = np.zeros(args["num_classes"], "float32")
    if args["init_values"] is not None:  # LayerScale around 1: the branches count
        for i in range(args["depth"]):
            sd[f"blocks.{i}.gamma_1"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
            sd[f"blocks.{i}.gamma_2"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
    for name in norms:
        sd[name + ".weight"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(d) * scale).astype("float32")
    return sd
