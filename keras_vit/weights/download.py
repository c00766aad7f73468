"""A preset's file in the Keras cache (:mod:`keras_vit.fetch.cache`), at its path under the bucket, verified as
that preset's: the zip CRC-32 and the ``.npy`` header of every array (a short array is refused), and shapes
that fit the preset's architecture.
"""

import os

from keras_vit.architecture import variants
from keras_vit.errors import CheckpointError
from keras_vit.fetch import cache
from keras_vit.weights import formats, npz, presets
from keras_vit.weights.architecture import infer

# the ViTConfig fields a preset's variant fixes that a file's shapes tell (the head and resolution may differ)
_ARCHITECTURE_FIELDS = ("patch_size", "hidden_size", "num_layers", "mlp_dim", "num_heads", "block_units", "width")


def cache_path(preset):
    """Where ``preset``'s file lives in the cache: its path under the bucket, below ``cache.cache_root()``.

    Example:
    >>> import os
    >>> path = cache_path(presets.find("B/16", "imagenet21k+imagenet2012", 384))
    >>> path.endswith(os.path.join("models", "keras_vit", "imagenet21k+imagenet2012", "ViT-B_16.npz"))
    True
    """
    return os.path.join(cache.cache_root(), *preset.file.split("/"))


def is_cached(preset):
    """Whether ``preset``'s file is in the cache."""
    return os.path.isfile(cache_path(preset))


def fetch(preset):
    """The local path of ``preset``'s file: from the cache (verified once), else downloaded, verified and cached.

    Raises ``DownloadError`` or ``CheckpointError`` as :func:`keras_vit.fetch.cache.fetch` does.

    Example:
    >>> path = fetch(presets.find("Ti/16", "augreg_in21k_ft_in1k", 224))  # doctest: +SKIP
    Downloading https://storage.googleapis.com/vit_models/augreg/Ti_16-...-res_224.npz into ...
    """
    return cache.fetch(
        presets.url_of(preset), cache_path(preset), lambda path: _verify(path, preset), sha256=preset.sha256,
        what=f"the {preset.tag!r} weights of {preset.variant}",
        elsewhere=f", or set {presets.URL_ENV} to a mirror that holds {preset.file!r}",
    )


def _verify(path, preset):
    """``CheckpointError`` saying why, unless ``path`` is a whole ``.npz`` of ``preset``'s architecture."""
    npz.verify_npz(path)
    found = infer(formats.describe(path), source=path)
    hybrid = "+" in preset.variant
    expected = (variants.decode_hybrid_variant if hybrid else variants.decode_variant)(preset.variant)
    wrong = [
        f"{field} {_plain(found.get(field))} (expected {_plain(expected[field])})"
        for field in _ARCHITECTURE_FIELDS
        if field in expected and _plain(found.get(field)) != _plain(expected[field])
    ]
    if wrong or (not hybrid and "block_units" in found):
        raise CheckpointError(
            f"its shapes are not those of {preset.variant}: " + (", ".join(wrong) or "a ResNet stem")
        )


def _plain(value):
    return tuple(value) if isinstance(value, list) else value
