"""An independent NumPy forward pass of Hugging Face transformers' ViT, read in its own layout.

Written from ``transformers/models/vit/modeling_vit.py`` and ``image_processing_vit.py``: it
takes the state dict as ``save_pretrained`` writes it (``nn.Linear`` weights ``(out, in)``,
the patch ``Conv2d`` ``(D, C, P, P)`` on channels-first pixels, separate query / key / value
split into ``num_attention_heads`` consecutive slices, ``layer_norm_eps`` of the config), and
the processor's ``(x / 255 - image_mean) / image_std``. It shares no code with keras_vit (and
none of its layout conversion), only the elementwise functions of :mod:`reference`.
"""

import math

import numpy as np

from reference import gelu, layer_norm, softmax


def linear(x, sd, name):
    """``nn.Linear``: ``x @ weight.T + bias``."""
    return x @ sd[name + ".weight"].T + sd[name + ".bias"]


def embeddings(pixels, sd):
    """``ViTEmbeddings``: Conv2d with stride P over (C, H, W), flatten row-major, [CLS], + positions."""
    weight = sd["vit.embeddings.patch_embeddings.projection.weight"]  # (D, C, P, P)
    p = weight.shape[-1]
    chw = pixels.transpose(2, 0, 1)
    rows, cols = chw.shape[1] // p, chw.shape[2] // p
    tokens = [
        np.einsum("chw,dchw->d", chw[:, i * p:(i + 1) * p, j * p:(j + 1) * p], weight)
        + sd["vit.embeddings.patch_embeddings.projection.bias"]
        for i in range(rows)
        for j in range(cols)
    ]
    z = np.concatenate([sd["vit.embeddings.cls_token"][0], np.stack(tokens)], axis=0)
    return z + sd["vit.embeddings.position_embeddings"][0]


def self_attention(x, sd, prefix, heads):
    """``ViTSelfAttention`` + ``ViTSelfOutput``: heads are consecutive slices of the projected width."""
    q, k, v = (linear(x, sd, f"{prefix}.attention.attention.{n}") for n in ("query", "key", "value"))
    size = q.shape[-1] // heads
    context = []
    for h in range(heads):
        s = slice(h * size, (h + 1) * size)
        context.append(softmax(q[:, s] @ k[:, s].T / math.sqrt(size)) @ v[:, s])
    return linear(np.concatenate(context, axis=-1), sd, f"{prefix}.attention.output.dense")


def vit_logits(images, sd, config, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """Logits of ``ViTForImageClassification`` (or the pooler output of ``ViTModel``) for RGB images in [0, 255]."""
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    out = []
    for image in np.asarray(images, np.float64):
        z = embeddings((image / 255.0 - np.asarray(mean)) / np.asarray(std), sd)
        i = 0
        while f"vit.encoder.layer.{i}.layernorm_before.weight" in sd:
            e = f"vit.encoder.layer.{i}"
            ln = layer_norm(z, sd[e + ".layernorm_before.weight"], sd[e + ".layernorm_before.bias"], eps)
            z = self_attention(ln, sd, e, heads) + z
            ln = layer_norm(z, sd[e + ".layernorm_after.weight"], sd[e + ".layernorm_after.bias"], eps)
            z = linear(gelu(linear(ln, sd, e + ".intermediate.dense")), sd, e + ".output.dense") + z
            i += 1
        first = layer_norm(z, sd["vit.layernorm.weight"], sd["vit.layernorm.bias"], eps)[0]
        if "classifier.weight" in sd:
            out.append(linear(first, sd, "classifier"))
        else:
            out.append(np.tanh(linear(first, sd, "vit.pooler.dense")))
    return np.stack(out)
