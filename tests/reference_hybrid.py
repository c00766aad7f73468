"""An independent NumPy hybrid ViT, written from google-research/vision_transformer.

Follows ``vit_jax/models_resnet.py`` (``weight_standardize``, ``StdConv``,
``ResidualUnit``, ``ResNetStage``) and the ``resnet`` branch of
``vit_jax/models_vit.VisionTransformer``, with Flax's defaults spelled out:
``nn.Conv(padding='SAME')`` and ``nn.max_pool(padding='SAME')`` pad as
``lax.padtype_to_pads`` does (total ``max((ceil(n/s) - 1) * s + k - n, 0)``,
``total // 2`` before and the rest after; max-pool pads with -inf), and
``nn.GroupNorm`` uses 32 groups and epsilon 1e-6. The Transformer part is
``tests/reference.py``. Shares no code with keras_vit; works on one image
``(H, W, C)`` at a time in float64, with the checkpoint's key layout.

``norms="timm"`` computes timm's hybrids instead (``timm/models/vision_transformer_hybrid.py``
``_resnetv2``): ``StdConv2dSame(eps=1e-8)`` standardises the kernel as ``F.batch_norm`` does,
``(w - mean) / sqrt(var + 1e-8)``, and ``GroupNormAct`` uses epsilon 1e-5; timm's ``SAME`` padding
(``pad_same``, ``MaxPool2dSame`` with -inf) is the padding above.
"""

import numpy as np

import reference

# norms -> (standardise with the epsilon on the std or the variance, its epsilon, GroupNorm epsilon)
NORMS = {"original": ("std", 1e-5, 1e-6), "timm": ("variance", 1e-8, 1e-5)}


def weight_standardize(w, eps=1e-5, on="std"):
    """``models_resnet.weight_standardize(w, axis=[0, 1, 2], eps=1e-5)``; ``on="variance"``: timm's StdConv2d."""
    w = w - np.mean(w, axis=(0, 1, 2))
    if on == "variance":
        return w / np.sqrt(np.var(w, axis=(0, 1, 2)) + eps)
    return w / (np.std(w, axis=(0, 1, 2)) + eps)


def same_pads(size, window, stride):
    """``lax.padtype_to_pads`` for 'SAME': (before, after)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


def conv2d(x, kernel, stride=1):
    """``nn.Conv(padding='SAME', use_bias=False)``: x (H, W, C), kernel (kh, kw, C, O)."""
    kh, kw = kernel.shape[:2]
    h, w = x.shape[:2]
    (t, b), (l, r) = same_pads(h, kh, stride), same_pads(w, kw, stride)
    x = np.pad(x, ((t, b), (l, r), (0, 0)))
    oh, ow = -(-h // stride), -(-w // stride)
    out = np.zeros((oh, ow, kernel.shape[3]))
    for i in range(kh):
        for j in range(kw):
            window = x[i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += window @ kernel[i, j]
    return out


def std_conv(x, kernel, stride=1, norms="original"):
    on, eps, _ = NORMS[norms]
    return conv2d(x, weight_standardize(kernel, eps, on), stride)


def group_norm(x, scale, bias, groups=32, eps=1e-6):
    """``nn.GroupNorm()``: statistics over (H, W, C / groups) per group."""
    h, w, c = x.shape
    g = x.reshape(h, w, groups, c // groups)
    mean = g.mean(axis=(0, 1, 3), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(0, 1, 3), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(h, w, c) * np.reshape(scale, -1) + np.reshape(bias, -1)


def max_pool(x, window=3, stride=2):
    """``nn.max_pool(window_shape=(3, 3), strides=(2, 2), padding='SAME')``."""
    h, w = x.shape[:2]
    (t, b), (l, r) = same_pads(h, window, stride), same_pads(w, window, stride)
    x = np.pad(x, ((t, b), (l, r), (0, 0)), constant_values=-np.inf)
    oh, ow = -(-h // stride), -(-w // stride)
    out = np.full((oh, ow, x.shape[2]), -np.inf)
    for i in range(window):
        for j in range(window):
            out = np.maximum(out, x[i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride])
    return out


def relu(x):
    return np.maximum(x, 0.0)


def residual_unit(x, p, features, stride, norms="original"):
    """``models_resnet.ResidualUnit``; ``p`` holds the unit's keys (``conv1/kernel``...)."""
    eps = NORMS[norms][2]

    def conv_gn(y, conv, gn, s=1):
        return group_norm(std_conv(y, p[f"{conv}/kernel"], s, norms), p[f"{gn}/scale"], p[f"{gn}/bias"], eps=eps)

    residual = x
    if x.shape[-1] != features * 4 or stride != 1:
        residual = conv_gn(x, "conv_proj", "gn_proj", stride)
    y = relu(conv_gn(x, "conv1", "gn1"))
    y = relu(conv_gn(y, "conv2", "gn2", stride))
    y = conv_gn(y, "conv3", "gn3")
    return relu(residual + y)


def root(x, params, norms="original"):
    """conv_root 7x7/2 -> gn_root -> relu -> max-pool 3x3/2."""
    x = std_conv(x, params["conv_root/kernel"], 2, norms)
    x = relu(group_norm(x, params["gn_root/scale"], params["gn_root/bias"], eps=NORMS[norms][2]))
    return max_pool(x)


def stage(x, params, index, units, width, norms="original"):
    """``ResNetStage`` ``block{index}`` (1-based): nout = width * 2**(index-1), first stride 2 after block1."""
    nout = width * 2 ** (index - 1)
    for j in range(units):
        stride = 2 if index > 1 and j == 0 else 1
        x = residual_unit(x, reference.sub(params, f"block{index}/unit{j + 1}"), nout, stride, norms)
    return x


def backbone(x, params, block_units, norms="original"):
    width = params["conv_root/kernel"].shape[-1]
    x = root(x, params, norms)
    for i, units in enumerate(block_units, 1):
        x = stage(x, params, i, units, width, norms)
    return x


def hybrid_logits(images, params, block_units, pooling="token", norms="original"):
    """Logits for RGB images in [0, 255], shape (B, H, W, 3)."""
    out = []
    for image in np.asarray(images, np.float64):
        x = backbone(image / 127.5 - 1.0, params, block_units, norms)
        tokens = reference.embed_patches(x, params)
        out.append(reference.classify(reference.encode(tokens, params, pooling), params))
    return np.stack(out)
