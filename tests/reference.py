"""An independent NumPy ViT, written from Eqs. 1-4 of the paper.

It shares no code with keras_vit: it reads the original checkpoint layout
(a dict of arrays named as in google-research/vision_transformer) and loops
over patches and heads explicitly.
"""

import math

import numpy as np

_erf = np.vectorize(math.erf)


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def msa(z, p):
    """Multi-head self-attention of one sequence z (N, D)."""
    heads = p["query/kernel"].shape[1]
    out = np.zeros_like(z)
    for h in range(heads):
        q = z @ p["query/kernel"][:, h] + p["query/bias"][h]
        k = z @ p["key/kernel"][:, h] + p["key/bias"][h]
        v = z @ p["value/kernel"][:, h] + p["value/bias"][h]
        a = softmax(q @ k.T / math.sqrt(q.shape[-1]))
        out += (a @ v) @ p["out/kernel"][h]
    return out + p["out/bias"]


def sub(params, prefix):
    return {k[len(prefix) + 1:]: v for k, v in params.items() if k.startswith(prefix + "/")}


def embed_patches(image, params):
    """x_p E for every patch, row-major, computed with the 4-D kernel."""
    kernel = params["embedding/kernel"]  # (P, P, C, D)
    ph, pw = kernel.shape[:2]
    rows, cols = image.shape[0] // ph, image.shape[1] // pw
    tokens = []
    for i in range(rows):
        for j in range(cols):
            patch = image[i * ph:(i + 1) * ph, j * pw:(j + 1) * pw, :]
            tokens.append(np.einsum("yxc,yxcd->d", patch, kernel) + params["embedding/bias"])
    return np.stack(tokens)


def encode(tokens, params, pooling="token"):
    """Eqs. 1-4 from the patch embeddings: class token, E_pos, blocks, LN, pooling."""
    z = tokens
    if pooling == "token":
        z = np.concatenate([params["cls"][0], z], axis=0)
    z = z + params["Transformer/posembed_input/pos_embedding"][0]
    layer = 0
    while f"Transformer/encoderblock_{layer}/LayerNorm_0/scale" in params:
        b = sub(params, f"Transformer/encoderblock_{layer}")
        z = msa(layer_norm(z, b["LayerNorm_0/scale"], b["LayerNorm_0/bias"]), sub(b, "MultiHeadDotProductAttention_1")) + z
        y = layer_norm(z, b["LayerNorm_2/scale"], b["LayerNorm_2/bias"])
        y = gelu(y @ b["MlpBlock_3/Dense_0/kernel"] + b["MlpBlock_3/Dense_0/bias"])
        z = y @ b["MlpBlock_3/Dense_1/kernel"] + b["MlpBlock_3/Dense_1/bias"] + z
        layer += 1
    z = layer_norm(z, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"])
    return z[0] if pooling == "token" else z.mean(0)


def classify(y, params):
    if "pre_logits/kernel" in params:
        y = np.tanh(y @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    return y @ params["head/kernel"] + params["head/bias"]


def vit_logits(images, params, pooling="token"):
    """Logits for RGB images in [0, 255], shape (B, H, W, 3)."""
    out = []
    for image in np.asarray(images, np.float64):
        x = image / 127.5 - 1.0  # pixels to [-1, 1]
        out.append(classify(encode(embed_patches(x, params), params, pooling), params))
    return np.stack(out)
