"""An independent NumPy forward pass of timm's ``VisionTransformer`` (and DeiT's distilled one), and a writer
of random state dicts in timm's layout; no keras_vit code.

Written from timm/models/vision_transformer.py (``VisionTransformer._pos_embed``, ``forward_features``,
``forward_head``, ``Block``, ``Attention``, ``LayerScale``), timm/layers/mlp.py (``Mlp``, ``GluMlp`` as
``SwiGLUPacked``: ``act(x1) * x2``), timm/layers/attention_pool.py (``AttentionPoolLatent``) and
timm/models/deit.py (``VisionTransformerDistilled``: the mean of ``head`` and ``head_dist`` at inference).
Arrays are in torch's layout: ``Linear.weight`` is ``(out, in)``, the patch convolution ``(D, C, P, P)``.
``args`` are timm's ``model_args`` names: ``patch_size, embed_dim, depth, num_heads, mlp_ratio, qkv_bias,
class_token, reg_tokens, no_embed_class, init_values, global_pool, fc_norm, pre_norm, final_norm,
act_layer, mlp_layer ("mlp", or "SwiGLUPacked" / "swiglu": timm's packed SwiGLU), num_classes, img_size,
distilled, pool_include_prefix, block_fn`` (``"ResPostBlock"``: ``x + norm1(attn(x))``, ``x + norm2(mlp(x))``, its ``init_values`` the
norms' initial scale, no LayerScale; ``"ParallelScalingBlock"``: ``x + ls(attn_out_proj(attn) + mlp_out_proj(act(x_mlp)))``
with ``x_mlp, q, k, v`` the ``[hidden, D, D, D]`` rows of ``in_proj(in_norm(x))``, ``mlp_bias`` where ``qkv_bias`` is
False; ``"DiffParallelScalingBlock"``: the same with differential attention and one fused ``out_proj``), ``attn_layer``
(``"diff"``: timm/layers/diff_attention.py's ``DiffAttention``, its ``lambda_init`` by the block's index); ``eps`` is
the LayerNorm epsilon (timm's CLIP registrations: 1e-5).
"""

import math

import numpy as np

_erf = np.vectorize(math.erf)

DEFAULTS = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True, class_token=True,
                reg_tokens=0, no_embed_class=False, init_values=None, global_pool="token", fc_norm=None, pre_norm=False,
                final_norm=True, act_layer="gelu", mlp_layer="mlp", num_classes=1000, img_size=224, distilled=False,
                eps=1e-6, block_fn="Block", pool_include_prefix=False)


def full_args(args):
    args = {**DEFAULTS, **args}
    if args["fc_norm"] is None:  # timm: use_fc_norm = global_pool in ('avg', 'avgmax', 'max') when fc_norm is None
        args["fc_norm"] = args["global_pool"] == "avg"
    return args


def act(x, name):
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "quick_gelu":
        return x / (1.0 + np.exp(-1.702 * x))
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    raise ValueError(name)


def layer_norm(x, sd, name, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * sd[name + ".weight"] + sd[name + ".bias"]


def linear(x, sd, name):
    y = x @ sd[name + ".weight"].T
    return y + sd[name + ".bias"] if name + ".bias" in sd else y


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def heads_attention(q, k, v, heads):
    """q (M, D), k and v (N, D): the heads one at a time."""
    hd = q.shape[-1] // heads
    out = []
    for h in range(heads):
        s = slice(h * hd, (h + 1) * hd)
        out.append(softmax(q[:, s] @ k[:, s].T / math.sqrt(hd)) @ v[:, s])
    return np.concatenate(out, axis=-1)


def diff_attention(q, k, v, sd, name, heads, depth):
    """timm's DiffAttention (non-fused path): sub-heads 2h and 2h + 1 of half a head's width, the second map
    weighted by lambda, each head RMS-normalised (eps 1e-5) and scaled by 1 - lambda_init."""
    half = q.shape[-1] // heads // 2
    init = 0.8 - 0.6 * math.exp(-0.3 * depth)
    lam = (math.exp(float(np.sum(sd[name + ".lambda_q1"] * sd[name + ".lambda_k1"])))
           - math.exp(float(np.sum(sd[name + ".lambda_q2"] * sd[name + ".lambda_k2"]))) + init)
    out = []
    for h in range(heads):
        one, two = slice(2 * h * half, (2 * h + 1) * half), slice((2 * h + 1) * half, (2 * h + 2) * half)
        a = softmax(q[:, one] @ k[:, one].T / math.sqrt(half)) - lam * softmax(q[:, two] @ k[:, two].T / math.sqrt(half))
        o = a @ v[:, 2 * h * half:(2 * h + 2) * half]
        o = o / np.sqrt(np.mean(o ** 2, axis=-1, keepdims=True) + 1e-5) * sd[name + ".sub_norm.weight"]
        out.append(o * (1 - init))
    return np.concatenate(out, axis=-1)


def _attend(q, k, v, sd, name, args, i):
    if args.get("attn_layer") == "diff" or args["block_fn"] == "DiffParallelScalingBlock":
        return diff_attention(q, k, v, sd, name, args["num_heads"], i)
    return heads_attention(q, k, v, args["num_heads"])


def mlp(x, sd, name, args):
    y = linear(x, sd, name + ".fc1")
    if args["mlp_layer"] in ("swiglu", "SwiGLUPacked"):
        x1, x2 = np.split(y, 2, axis=-1)
        y = act(x1, "silu") * x2
    else:
        y = act(y, args["act_layer"])
    return linear(y, sd, name + ".fc2")


def block(x, sd, i, args):
    p = f"blocks.{i}"
    if args["block_fn"] in ("ParallelScalingBlock", "DiffParallelScalingBlock"):  # their forward (timm's defaults)
        d = x.shape[-1]
        y = linear(layer_norm(x, sd, p + ".in_norm", args["eps"]), sd, p + ".in_proj")
        x_mlp, q, k, v = np.split(y, [y.shape[-1] - 3 * d, y.shape[-1] - 2 * d, y.shape[-1] - d], axis=-1)
        if p + ".mlp_bias" in sd:
            x_mlp = x_mlp + sd[p + ".mlp_bias"]
        x_mlp = act(x_mlp, args["act_layer"])
        if args["block_fn"] == "DiffParallelScalingBlock":  # one fused out_proj of [attention | MLP]
            y = linear(np.concatenate([_attend(q, k, v, sd, p, args, i), x_mlp], axis=-1), sd, p + ".out_proj")
        else:
            y = linear(heads_attention(q, k, v, args["num_heads"]), sd, p + ".attn_out_proj")
            y = y + linear(x_mlp, sd, p + ".mlp_out_proj")
        return x + (y * sd[p + ".ls.gamma"] if p + ".ls.gamma" in sd else y)
    if args["block_fn"] == "ResPostBlock":  # timm's ResPostBlock.forward
        q, k, v = np.split(linear(x, sd, p + ".attn.qkv"), 3, axis=-1)
        x = x + layer_norm(linear(heads_attention(q, k, v, args["num_heads"]), sd, p + ".attn.proj"), sd, p + ".norm1", args["eps"])
        return x + layer_norm(mlp(x, sd, p + ".mlp", args), sd, p + ".norm2", args["eps"])
    y = layer_norm(x, sd, p + ".norm1", args["eps"])
    q, k, v = np.split(linear(y, sd, p + ".attn.qkv"), 3, axis=-1)
    y = linear(_attend(q, k, v, sd, p + ".attn", args, i), sd, p + ".attn.proj")
    if p + ".ls1.gamma" in sd:
        y = y * sd[p + ".ls1.gamma"]
    x = x + y
    y = mlp(layer_norm(x, sd, p + ".norm2", args["eps"]), sd, p + ".mlp", args)
    if p + ".ls2.gamma" in sd:
        y = y * sd[p + ".ls2.gamma"]
    return x + y


def conv_stem(image, sd, eps=1e-5):
    """timm's ConvStem (MobileCLIP's, vision_transformer_hybrid.py) under a HybridEmbed without projection: patchify
    convolutions (a kernel its stride, no padding), BatchNorm (running statistics) and exact GELU but the last, whose
    bias ends it; its output's pixels are the tokens, row-major."""
    x, i = image, 0
    while f"patch_embed.backbone.{i}.conv.weight" in sd:
        p = f"patch_embed.backbone.{i}"
        w = sd[p + ".conv.weight"]  # (O, I, k, k)
        k = w.shape[-1]
        rows, cols = x.shape[0] // k, x.shape[1] // k
        blocks = x[: rows * k, : cols * k].reshape(rows, k, cols, k, -1)  # (rows, ky, cols, kx, C)
        x = np.einsum("aybxc,ocyx->abo", blocks, w)
        if p + ".conv.bias" in sd:
            x = x + sd[p + ".conv.bias"]
        if p + ".bn.weight" in sd:
            x = (x - sd[p + ".bn.running_mean"]) / np.sqrt(sd[p + ".bn.running_var"] + eps) * sd[p + ".bn.weight"] + sd[p + ".bn.bias"]
            x = act(x, "gelu")
        i += 1
    return x.reshape(-1, x.shape[-1])


def patches(image, sd, patch):
    """image (H, W, C) in the model's input scale -> (N, D), row-major."""
    if "patch_embed.backbone.0.conv.weight" in sd:
        return conv_stem(image, sd)
    w = sd["patch_embed.proj.weight"]  # (D, C, P, P)
    rows, cols = image.shape[0] // patch, image.shape[1] // patch
    out = []
    for i in range(rows):
        for j in range(cols):
            piece = image[i * patch:(i + 1) * patch, j * patch:(j + 1) * patch]  # (P, P, C)
            out.append(np.einsum("yxc,dcyx->d", piece, w))
    out = np.stack(out)
    return out + sd["patch_embed.proj.bias"] if "patch_embed.proj.bias" in sd else out


def forward(image, sd, args, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """Logits (or the pooled vector with num_classes=0) of one image (H, W, 3) of [0, 255] pixels."""
    args = full_args(args)
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    x = patches(x, sd, args["patch_size"])
    prefix = []
    if args["class_token"]:
        prefix.append(sd["cls_token"][0])
    if args["distilled"]:
        prefix.append(sd["dist_token"][0])
    if args["reg_tokens"]:
        prefix.append(sd["reg_token"][0])
    pos = sd["pos_embed"][0]
    if args["no_embed_class"]:
        x = np.concatenate(prefix + [x + pos])
    else:
        x = np.concatenate(prefix + [x]) + pos
    num_prefix = sum(len(p) for p in prefix)
    if args["pre_norm"]:
        x = layer_norm(x, sd, "norm_pre", args["eps"])
    for i in range(args["depth"]):
        x = block(x, sd, i, args)
    if args["final_norm"] and not args["fc_norm"]:
        x = layer_norm(x, sd, "norm", args["eps"])
    if args["distilled"]:
        if not args["num_classes"]:
            return (x[0] + x[1]) / 2
        return (linear(x[0], sd, "head") + linear(x[1], sd, "head_dist")) / 2
    pooled = x if args["pool_include_prefix"] else x[num_prefix:]  # VisionTransformer.pool: the patch tokens by default
    if args["global_pool"] == "map":
        q = linear(sd["attn_pool.latent"][0], sd, "attn_pool.q")
        k, v = np.split(linear(pooled, sd, "attn_pool.kv"), 2, axis=-1)
        y = linear(heads_attention(q, k, v, args["num_heads"]), sd, "attn_pool.proj")
        y = y + mlp(layer_norm(y, sd, "attn_pool.norm", args["eps"]), sd, "attn_pool.mlp", {**args, "mlp_layer": "mlp"})
        x = y[0]
    elif args["global_pool"] == "avg":
        x = pooled.mean(0)
    elif args["global_pool"] == "token":
        x = x[0]
    else:
        return x
    if args["fc_norm"]:
        x = layer_norm(x, sd, "fc_norm", args["eps"])
    return linear(x, sd, "head") if args["num_classes"] else x


def state_dict(args, seed=0, scale=0.2):
    """Random float32 weights of the timm model ``args`` describes, named and shaped as timm saves them."""
    args = full_args(args)
    rng = np.random.default_rng(seed)
    d, p = args["embed_dim"], args["patch_size"]
    hidden = int(d * args["mlp_ratio"])
    grid = (args["img_size"] // p) ** 2
    prefix = int(args["class_token"]) + int(args["distilled"]) + args["reg_tokens"]
    shapes = {"patch_embed.proj.weight": (d, 3, p, p), "pos_embed": (1, grid + (0 if args["no_embed_class"] else prefix), d)}
    batch_norms = []
    if args.get("conv_stem"):  # ConvStem ((channels, stride), ...), the last one's channels d: no patch_embed.proj
        channels, strides = zip(*args["conv_stem"])
        grid = (args["img_size"] // int(np.prod(strides))) ** 2
        shapes = {"pos_embed": (1, grid + (0 if args["no_embed_class"] else prefix), d)}
        for i, (out, stride) in enumerate(args["conv_stem"]):
            shapes[f"patch_embed.backbone.{i}.conv.weight"] = (out, 3 if i == 0 else channels[i - 1], stride, stride)
            if i == len(channels) - 1:
                shapes[f"patch_embed.backbone.{i}.conv.bias"] = (out,)
            else:
                batch_norms.append((f"patch_embed.backbone.{i}.bn", out))
    elif not args["pre_norm"]:
        shapes["patch_embed.proj.bias"] = (d,)  # timm: bias=not pre_norm (CLIP's conv1 has none)
    for name, on in (("cls_token", args["class_token"]), ("dist_token", args["distilled"])):
        if on:
            shapes[name] = (1, 1, d)
    if args["reg_tokens"]:
        shapes["reg_token"] = (1, args["reg_tokens"], d)
    norms = (["norm_pre"] if args["pre_norm"] else []) + (["norm"] if args["final_norm"] and not args["fc_norm"] else [])
    norms += ["fc_norm"] if args["fc_norm"] else []
    extra_norms = []

    def mlp_shapes(name, hidden, glu):
        return {f"{name}.fc1.weight": (hidden, d), f"{name}.fc1.bias": (hidden,),
                f"{name}.fc2.weight": (d, hidden // 2 if glu else hidden), f"{name}.fc2.bias": (d,)}

    for i in range(args["depth"]):
        b = f"blocks.{i}"
        diff = f"{b}." if args["block_fn"] == "DiffParallelScalingBlock" else f"{b}.attn." if args.get("attn_layer") == "diff" else None
        if diff:  # DiffAttention's lambda vectors (half a head) and its head norm (RmsNorm: a weight, set below)
            half = d // args["num_heads"] // 2
            shapes.update({f"{diff}lambda_{n}": (half,) for n in ("q1", "k1", "q2", "k2")})
            extra_norms.append((f"{diff}sub_norm", 2 * half))
        if args["block_fn"] == "DiffParallelScalingBlock":
            norms.append(f"{b}.in_norm")
            shapes.update({f"{b}.in_proj.weight": (hidden + 3 * d, d), f"{b}.out_proj.weight": (d, d + hidden),
                           f"{b}.out_proj.bias": (d,)})
        if args["block_fn"] == "ParallelScalingBlock":
            norms.append(f"{b}.in_norm")
            shapes.update({f"{b}.in_proj.weight": (hidden + 3 * d, d), f"{b}.attn_out_proj.weight": (d, d),
                           f"{b}.attn_out_proj.bias": (d,), f"{b}.mlp_out_proj.weight": (d, hidden),
                           f"{b}.mlp_out_proj.bias": (d,)})
        if "Parallel" in args["block_fn"]:
            shapes[f"{b}.in_proj.bias" if args["qkv_bias"] else f"{b}.mlp_bias"] = (hidden + 3 * d,) if args["qkv_bias"] else (hidden,)
            if args["init_values"]:
                shapes[f"{b}.ls.gamma"] = (d,)
            continue
        norms += [f"{b}.norm1", f"{b}.norm2"]
        shapes[f"{b}.attn.qkv.weight"] = (3 * d, d)
        if args["qkv_bias"]:
            shapes[f"{b}.attn.qkv.bias"] = (3 * d,)
        shapes.update({f"{b}.attn.proj.weight": (d, d), f"{b}.attn.proj.bias": (d,)})
        shapes.update(mlp_shapes(f"{b}.mlp", hidden, args["mlp_layer"] in ("swiglu", "SwiGLUPacked")))
        if args["init_values"] and args["block_fn"] != "ResPostBlock":  # ResPostBlock's scale its norms
            shapes.update({f"{b}.ls1.gamma": (d,), f"{b}.ls2.gamma": (d,)})
    if args["global_pool"] == "map":
        shapes.update({"attn_pool.latent": (1, 1, d), "attn_pool.q.weight": (d, d), "attn_pool.kv.weight": (2 * d, d),
                       "attn_pool.proj.weight": (d, d), "attn_pool.proj.bias": (d,)})
        # timm's AttentionPoolLatent has q/kv biases whatever the blocks' qkv_bias (VisionTransformer passes none)
        shapes.update({"attn_pool.q.bias": (d,), "attn_pool.kv.bias": (2 * d,)})
        norms.append("attn_pool.norm")
        shapes.update(mlp_shapes("attn_pool.mlp", int(d * args["mlp_ratio"]), False))
    if args["num_classes"]:
        shapes.update({"head.weight": (args["num_classes"], d), "head.bias": (args["num_classes"],)})
        if args["distilled"]:
            shapes.update({"head_dist.weight": (args["num_classes"], d), "head_dist.bias": (args["num_classes"],)})
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    for name in norms:
        sd[name + ".weight"] = (1.0 + rng.standard_normal(d) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(d) * scale).astype("float32")
    for name, width in extra_norms:  # RmsNorm: a weight, no bias
        sd[name + ".weight"] = (1.0 + rng.standard_normal(width) * scale).astype("float32")
    for name, width in batch_norms:  # BatchNorm: scale, shift and running statistics (a variance in [0.5, 1.5])
        sd[name + ".weight"] = (1.0 + rng.standard_normal(width) * scale).astype("float32")
        sd[name + ".bias"] = (rng.standard_normal(width) * scale).astype("float32")
        sd[name + ".running_mean"] = (rng.standard_normal(width) * scale).astype("float32")
        sd[name + ".running_var"] = rng.uniform(0.5, 1.5, width).astype("float32")
        sd[name + ".num_batches_tracked"] = np.array(7, np.int64)
    return sd
