"""Tiny hybrids and original hybrid checkpoints (``R50+ViT-B_16.npz`` layout) for the tests."""

import numpy as np

import keras_vit
from helpers import vit_checkpoint

# tiny hybrid: root width 32 (width=0.5), stages (2, 1, 1) -> 512 channels at stride 16, tiny Transformer
TINY_VIT = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


TINY = dict(block_units=(2, 1, 1), width=0.5, image_size=64, **TINY_VIT)


# conv kernels of trained-network size: the std-conv epsilon (1e-5, added to the std) then shows in the logits
CONV_SCALE = 0.01


def tiny_hybrid(**overrides):
    config = dict(TINY, num_classes=5, classifier_activation=None)
    config.update(overrides)
    return keras_vit.HybridViT(**config)


def hybrid_checkpoint(
    block_units=(2, 1, 1),
    width=0.5,
    grid=(4, 4),
    patch_size=1,
    gn_layout="new",
    naming="original",
    representation_size=None,
    seed=0,
    **vit,
):
    """Random arrays named and shaped as an original hybrid ``.npz`` (``R50+ViT-B_16.npz``).

    Keys as ``models_vit.VisionTransformer`` names them: ``conv_root``, ``gn_root``,
    ``block{i}/unit{j}/{conv,gn}{1,2,3}``, ``conv_proj``/``gn_proj`` in each
    stage's first unit, then ``embedding/kernel`` of shape (P, P, 4 * width_last, D)
    and the Transformer. ``gn_layout="old"`` stores GroupNorm parameters as
    (1, 1, 1, C), as checkpoints saved by Flax < 0.3.6 do.
    """
    rng = np.random.default_rng(seed + 1)
    vit = dict(TINY_VIT, **vit)

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype("float32")

    def gn(prefix, channels):
        shape = (1, 1, 1, channels) if gn_layout == "old" else (channels,)
        return {f"{prefix}/scale": 1 + r(*shape), f"{prefix}/bias": r(*shape)}

    root = int(64 * width)
    p = {"conv_root/kernel": r(7, 7, 3, root, scale=CONV_SCALE), **gn("gn_root", root)}
    channels = root
    for i, units in enumerate(block_units, 1):
        f = root * 2 ** (i - 1)
        for j in range(1, units + 1):
            u = f"block{i}/unit{j}"
            p[f"{u}/conv1/kernel"] = r(1, 1, channels, f, scale=CONV_SCALE)
            p[f"{u}/conv2/kernel"] = r(3, 3, f, f, scale=CONV_SCALE)
            p[f"{u}/conv3/kernel"] = r(1, 1, f, 4 * f, scale=CONV_SCALE)
            for k, c in ((1, f), (2, f), (3, 4 * f)):
                p.update(gn(f"{u}/gn{k}", c))
            if j == 1:
                p[f"{u}/conv_proj/kernel"] = r(1, 1, channels, 4 * f, scale=CONV_SCALE)
                p.update(gn(f"{u}/gn_proj", 4 * f))
            channels = 4 * f
    transformer = vit_checkpoint(
        patch_size=patch_size, grid=grid, representation_size=representation_size, naming=naming, seed=seed, **vit
    )
    prefix = "params/" if naming == "flax" else ""
    transformer[prefix + "embedding/kernel"] = r(patch_size, patch_size, channels, vit["hidden_size"])
    p = {prefix + k: v for k, v in p.items()}
    p.update(transformer)
    return p

