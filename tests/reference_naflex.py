"""An independent NumPy NaFlex ViT: one image at a time, its own patches only (no padding, no mask), loops.

Written from timm 1.0.31's ``naflexvit.py`` (``NaFlexEmbeds`` per image, ``global_pool_naflex``, ``AttentionPoolLatent``)
and torch's ``F.interpolate`` kernels as Pillow writes them (a window per output sample, a filter, the row normalised).
C-RADIO's tables (``antialias=False``) take the loops of ``reference_resampling.torch_bilinear``, with
``align_corners`` False (``"bilinear_torch"``) or True (``"linear_aligned"``). It shares no code with keras_vit: it
reads the model's weights by their paths.
"""

import math

import numpy as np

from reference import gelu, layer_norm, softmax
from reference_resampling import torch_bilinear


def _cubic(x, a=-0.5):
    x = abs(x)
    if x < 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def _triangle(x):
    return max(0.0, 1.0 - abs(x))


def antialiased(new, old, kernel):
    """``(new, old)``: torch's ``antialias=True`` weights (Pillow's ``precompute_coeffs``)."""
    scale = old / new
    support = (2.0 if kernel == "bicubic" else 1.0) * max(scale, 1.0)
    f = _cubic if kernel == "bicubic" else _triangle
    m = np.zeros((new, old))
    for i in range(new):
        center = (i + 0.5) * scale
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), old)
        w = [f((j - center + 0.5) / max(scale, 1.0)) for j in range(lo, hi)]
        total = sum(w)
        for j, v in zip(range(lo, hi), w):
            m[i, j] = v / total if total else 0.0
    return m


def linear(new, old):
    """``(new, old)``: torch's ``mode='linear', align_corners=False`` weights."""
    m = np.zeros((new, old))
    for i in range(new):
        x = max((i + 0.5) * old / new - 0.5, 0.0)
        i0 = int(x)
        i1 = i0 + (1 if i0 < old - 1 else 0)
        m[i, i0] += 1.0 - (x - i0)
        m[i, i1] += x - i0
    return m


def positions(w, grid, cfg):
    """``(h * w, D)`` positions of an image of ``grid`` (timm's ``_apply_*_naflex_pos_embed``)."""
    h, wd = grid
    L = (max(h, wd),) * 2 if cfg["aspect_preserving"] else (h, wd)
    if cfg["factorized"]:
        ty, tx = w["patch_encoder/position_embedding_rows"][0], w["patch_encoder/position_embedding_cols"][0]
        py = (linear(L[0], ty.shape[0]) @ ty)[:h]
        px = (linear(L[1], tx.shape[0]) @ tx)[:wd]
        return (py[:, None] + px[None]).reshape(h * wd, -1)
    rows, cols = cfg["grid"]
    table = w["patch_encoder/position_embedding"][0].reshape(rows, cols, -1)
    kernel = cfg["kernel"]
    if kernel in ("bilinear_torch", "linear_aligned"):  # F.interpolate(mode='bilinear', antialias=False)
        out = np.stack([torch_bilinear(table[..., d], L, align_corners=kernel == "linear_aligned")
                        for d in range(table.shape[-1])], axis=-1)
        return out[:h, :wd].reshape(h * wd, -1)
    kernel = "bilinear" if kernel.startswith("bilinear") else "bicubic"  # antialiased
    out = np.einsum("ir,rcd->icd", antialiased(L[0], rows, kernel), table)
    out = np.einsum("jc,icd->ijd", antialiased(L[1], cols, kernel), out)
    return out[:h, :wd].reshape(h * wd, -1)


def _attention(z, w, prefix, heads, keys=None):
    keys = z if keys is None else keys
    out = np.zeros((z.shape[0], w[prefix + "attention_output/kernel"].shape[-1]))
    q_all = np.einsum("nd,dhk->nhk", z, w[prefix + "query/kernel"]) + w[prefix + "query/bias"]
    k_all = np.einsum("nd,dhk->nhk", keys, w[prefix + "key/kernel"]) + w[prefix + "key/bias"]
    v_all = np.einsum("nd,dhk->nhk", keys, w[prefix + "value/kernel"]) + w[prefix + "value/bias"]
    for h in range(heads):
        a = softmax(q_all[:, h] @ k_all[:, h].T / math.sqrt(q_all.shape[-1]))
        out += (a @ v_all[:, h]) @ w[prefix + "attention_output/kernel"][h]
    return out + w[prefix + "attention_output/bias"]


def _ln(x, w, name, eps=1e-6):
    return layer_norm(x, w[name + "/gamma"], w[name + "/beta"], eps)


def forward(pixels, w, cfg):
    """The pooled output (and logits with a head) of one image ``(h * P, w * P, 3)`` in [0, 255]."""
    p = cfg["patch"]
    h, wd = pixels.shape[0] // p, pixels.shape[1] // p
    x = pixels / 127.5 - 1.0
    patches = np.stack([x[i * p:(i + 1) * p, j * p:(j + 1) * p].reshape(-1) for i in range(h) for j in range(wd)])
    z = patches @ w["patch_encoder/projection/kernel"] + w["patch_encoder/projection/bias"]
    z = z + positions(w, (h, wd), cfg)
    prefix = [w["patch_encoder/class_token"][0]] if cfg["class_token"] else []
    prefix += [w["patch_encoder/register_tokens"][0]] if cfg["registers"] else []
    z = np.concatenate(prefix + [z])
    n_prefix = sum(t.shape[0] for t in prefix)
    for i in range(cfg["layers"]):
        b = f"transformer_block_{i}/"
        y = _attention(_ln(z, w, b + "layer_norm_1"), w, b + "attention/", cfg["heads"])
        z = z + y * w.get(b + "layer_scale_1/gamma", 1.0)
        y = gelu(_ln(z, w, b + "layer_norm_2") @ w[b + "mlp_dense_1/kernel"] + w[b + "mlp_dense_1/bias"])
        y = y @ w[b + "mlp_dense_2/kernel"] + w[b + "mlp_dense_2/bias"]
        z = z + y * w.get(b + "layer_scale_2/gamma", 1.0)
    if "encoder_norm/gamma" in w:
        z = _ln(z, w, "encoder_norm")
    if cfg["pooling"] == "token":
        pooled = z[0]
    elif cfg["pooling"] == "gap":
        pooled = z[n_prefix:].mean(0)
    else:  # map over the patch tokens (timm's NaFlexVit: pool_include_prefix=False)
        m = "map_head/"
        probe = w[m + "probe"][0]
        heads, width = cfg["heads"], probe.shape[-1]
        q = probe @ w[m + "query/kernel"] + w[m + "query/bias"]
        k = z[n_prefix:] @ w[m + "key/kernel"] + w[m + "key/bias"]
        v = z[n_prefix:] @ w[m + "value/kernel"] + w[m + "value/bias"]
        hd = width // heads
        out = np.concatenate([softmax(q[:, i * hd:(i + 1) * hd] @ k[:, i * hd:(i + 1) * hd].T / math.sqrt(hd))
                              @ v[:, i * hd:(i + 1) * hd] for i in range(heads)], axis=-1)
        y = out @ w[m + "attention_output/kernel"] + w[m + "attention_output/bias"]
        t = gelu(_ln(y, w, m + "layer_norm") @ w[m + "mlp_dense_1/kernel"] + w[m + "mlp_dense_1/bias"])
        pooled = (y + t @ w[m + "mlp_dense_2/kernel"] + w[m + "mlp_dense_2/bias"])[0]
    if "fc_norm/gamma" in w:
        pooled = _ln(pooled, w, "fc_norm")
    if "head/kernel" in w:
        return pooled @ w["head/kernel"] + w["head/bias"]
    return pooled
