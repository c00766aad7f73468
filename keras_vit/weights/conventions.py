"""What several weight sources share: the input normalisations they declare, and PyTorch's tensor layout.

The sources (:mod:`~keras_vit.weights.timm`, :mod:`~keras_vit.weights.transformers`,
:mod:`~keras_vit.weights.keras_hub`) import these from here, never from each other.
"""

import numpy as np

from keras_vit.errors import CheckpointError

# (mean, std) of the input normalisations the families were trained with
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
CLIP_MEAN_STD = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def patch_kernel(key, array, path):
    """A PyTorch patch-embedding convolution ``(D, C, P, P)`` as the original ``embedding/kernel`` ``(P, P, C, D)``.

    Example:
    >>> patch_kernel("patch_embed.proj.weight", np.zeros((8, 3, 4, 4)), "m.safetensors").shape
    (4, 4, 3, 8)
    """
    if array.ndim != 4:
        raise CheckpointError(f"Checkpoint {path!r}: {key!r} has shape {array.shape}, expected (D, C, P, P).")
    return array.transpose(2, 3, 1, 0)


def finish(out, unknown, path, layout):
    """Refuse the keys no ViT has (named, at most 10 shown); returns ``out``.

    A file without query/key/value biases keeps none: it declares ``qkv_bias=False``
    (:func:`keras_vit.weights.formats.describe`) and loads into a model built without them.
    """
    if unknown:
        raise CheckpointError(
            f"Checkpoint {path!r} ({layout} layout) has {len(unknown)} key(s) that are not part of a ViT: "
            f"{', '.join(sorted(unknown)[:10])}"
        )
    return out
