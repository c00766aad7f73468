"""An independent NumPy forward pass of AIMv2's vision encoder, and writers of random weights in timm's and
transformers' layouts; no keras_vit code.

Written from timm 1.0.31 (``timm/models/vision_transformer.py``'s ``aimv2_*`` registrations: ``class_token=False``,
``global_pool='avg'``, ``fc_norm=False``, ``qkv_bias=False``, ``proj_bias=False``, ``act_layer='silu'``,
``norm_layer`` and ``embed_norm_layer`` ``RmsNorm(eps=1e-5)``, ``mlp_layer=SwiGLU``; ``PatchEmbed`` with its norm
after the projection, before ``pos_embed`` is added; ``timm/layers/norm.py`` ``RmsNorm`` = ``x * rsqrt(mean(x ** 2) +
eps) * weight``; ``timm/layers/mlp.py`` ``SwiGLU`` = ``fc2(act(fc1_g x) * fc1_x x)``) and transformers 5.24's
``models/aimv2/modeling_aimv2.py`` (``Aimv2VisionModel`` with ``use_head=False``: the same computation under other
names, ``last_hidden_state`` the tokens after the final ``rms_norm``). Arrays are in torch's layout.
"""

import math

import numpy as np

CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])


def rms_norm(x, weight, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight


def linear(x, sd, name):
    y = x @ sd[name + ".weight"].T
    return y + sd[name + ".bias"] if name + ".bias" in sd else y


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def block(x, sd, b, heads, eps):
    """One timm ``Block`` of AIMv2 on ``x`` ``(N, D)``: RMSNorm, attention (fused ``qkv``), RMSNorm, SwiGLU."""
    q, k, v = np.split(linear(rms_norm(x, sd[b + ".norm1.weight"], eps), sd, b + ".attn.qkv"), 3, axis=-1)
    hd = q.shape[-1] // heads
    out = [softmax(q[:, h * hd:(h + 1) * hd] @ k[:, h * hd:(h + 1) * hd].T / math.sqrt(hd)) @ v[:, h * hd:(h + 1) * hd]
           for h in range(heads)]
    x = x + linear(np.concatenate(out, axis=-1), sd, b + ".attn.proj")
    y = rms_norm(x, sd[b + ".norm2.weight"], eps)
    return x + linear(silu(linear(y, sd, b + ".mlp.fc1_g")) * linear(y, sd, b + ".mlp.fc1_x"), sd, b + ".mlp.fc2")


def tokens(image, sd, heads, patch, eps=1e-5, mean=CLIP[0], std=CLIP[1]):
    """The final-normed tokens ``(N, D)`` of one ``(H, W, 3)`` image of [0, 255] pixels (timm state dict)."""
    x = (np.asarray(image, "float64") / 255.0 - np.asarray(mean)) / np.asarray(std)
    rows, cols = x.shape[0] // patch, x.shape[1] // patch
    cut = x[:rows * patch, :cols * patch].reshape(rows, patch, cols, patch, 3).transpose(0, 2, 4, 1, 3)
    w = sd["patch_embed.proj.weight"]  # (D, C, P, P)
    z = cut.reshape(rows * cols, -1) @ w.reshape(w.shape[0], -1).T + sd["patch_embed.proj.bias"]
    z = rms_norm(z, sd["patch_embed.norm.weight"], eps) + sd["pos_embed"][0]
    depth = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    for i in range(depth):
        z = block(z, sd, f"blocks.{i}", heads, eps)
    return rms_norm(z, sd["norm.weight"], eps)


def state_dict(dim=32, depth=2, hidden=40, patch=8, grid=(4, 4), seed=0, bias=False, scale=0.2):
    """Random float32 weights of a tiny AIMv2 in timm's layout (``bias``: attention and MLP biases, timm's
    ``qkv_bias=proj_bias=True``, transformers' ``qkv_bias=mlp_bias=True``)."""
    rng = np.random.default_rng(seed)
    shapes = {"patch_embed.proj.weight": (dim, 3, patch, patch), "patch_embed.proj.bias": (dim,),
              "pos_embed": (1, grid[0] * grid[1], dim)}
    norms = ["patch_embed.norm", "norm"]
    for i in range(depth):
        b = f"blocks.{i}"
        norms += [b + ".norm1", b + ".norm2"]
        shapes.update({b + ".attn.qkv.weight": (3 * dim, dim), b + ".attn.proj.weight": (dim, dim),
                       b + ".mlp.fc1_g.weight": (hidden, dim), b + ".mlp.fc1_x.weight": (hidden, dim),
                       b + ".mlp.fc2.weight": (dim, hidden)})
        if bias:
            shapes.update({b + ".attn.qkv.bias": (3 * dim,), b + ".attn.proj.bias": (dim,), b + ".mlp.fc1_g.bias": (hidden,),
                           b + ".mlp.fc1_x.bias": (hidden,), b + ".mlp.fc2.bias": (dim,)})
    sd = {name: (rng.standard_normal(shape) * scale).astype("float32") for name, shape in shapes.items()}
    for name in norms:
        sd[name + ".weight"] = (1.0 + rng.standard_normal(dim) * scale).astype("float32")
    return sd


# timm's names -> transformers' (Aimv2VisionModel, its own names: no prefix)
_TOP = {"patch_embed.proj.weight": "embeddings.patch_embed.weight", "patch_embed.proj.bias": "embeddings.patch_embed.bias",
        "patch_embed.norm.weight": "embeddings.rms_norm.weight", "norm.weight": "rms_norm.weight"}
_LAYER = {"norm1": "rms_norm1", "norm2": "rms_norm2", "attn.proj": "attention.out_proj", "mlp.fc1_g": "ffn.gate_proj",
          "mlp.fc1_x": "ffn.up_proj", "mlp.fc2": "ffn.down_proj"}


def to_transformers(sd):
    """The state dict ``Aimv2VisionModel.save_pretrained`` writes for the same model: ``q/k/v_proj`` apart,
    ``position_embedding`` an ``nn.Embedding`` ``(N, D)``."""
    out = {}
    for key, value in sd.items():
        if key == "pos_embed":
            out["embeddings.position_embedding.weight"] = value[0]
        elif key in _TOP:
            out[_TOP[key]] = value
        else:
            _, i, rest = key.split(".", 2)
            name, kind = rest.rsplit(".", 1)
            if name == "attn.qkv":
                for part, chunk in zip("qkv", np.split(value, 3, axis=0)):
                    out[f"encoder.layers.{i}.attention.{part}_proj.{kind}"] = chunk
            else:
                out[f"encoder.layers.{i}.{_LAYER[name]}.{kind}"] = value
    return out
