"""What ``weights=`` may name, turned into a local path (:func:`resolve`, the one entry point the builders call);
a preset's file is fetched into the Keras cache at its path under the bucket and verified as that preset's: the zip
CRC-32 and ``.npy`` header of every array (a short array is refused), and shapes that fit its architecture.
"""

import os

from keras_vit.architecture import variants
from keras_vit.errors import CheckpointError
from keras_vit.fetch import cache, hub, kaggle
from keras_vit.weights import formats, npz, presets
from keras_vit.weights.architecture import infer

HF_PREFIX = hub.SCHEME
KAGGLE_PREFIX = kaggle.SCHEME


def resolve(weights, *, variant=None, hybrid=None, image_size=None):
    """Turn a builder's ``weights=`` into a local path (or None), downloading what needs it.

    ``weights``: None; a local file or folder; a preset tag (``"imagenet21k"``...: :mod:`keras_vit.weights.presets`),
    the file of ``variant`` (the registry name of the model being built, ``"B/16"``; None: no registered variant)
    at ``image_size`` (else the nearest); ``"hf://ORG/NAME"``, a Hugging Face Hub repository
    (:func:`keras_vit.fetch.hub.fetch`); or ``"kaggle://OWNER/MODEL/keras/VARIATION[/VERSION]"``, a keras-hub
    preset on Kaggle Models (:func:`keras_vit.fetch.kaggle.fetch`, kagglehub installed). ``hybrid`` only words the
    error for a tag given to an unregistered shape. A ``ValueError`` lists what is accepted.

    Example:
    >>> resolve(None) is None
    True
    >>> resolve("no_such_file.npz")
    Traceback (most recent call last):
    ...
    ValueError: `weights` must be None, a local file or folder, a preset tag (imagenet21k, ...) or 'hf://ORG/NAME'. Received: weights='no_such_file.npz' (no such file)
    """
    if weights is None:
        return None
    if not isinstance(weights, (str, os.PathLike)):
        raise TypeError(
            "`weights` must be None, a path, a preset tag or 'hf://ORG/NAME'. "
            f"Received: weights={weights!r} of type {type(weights).__name__}"
        )
    if isinstance(weights, str) and weights.startswith(HF_PREFIX):
        return hub.fetch(weights)  # huggingface_hub is imported there, for hf:// sources only
    if isinstance(weights, str) and weights.startswith(KAGGLE_PREFIX):
        return kaggle.fetch(weights)  # kagglehub, optional, is imported there
    if os.path.exists(os.fspath(weights)):
        return os.fspath(weights)
    if presets.is_tag(weights):
        if variant is None:
            kind = "R50ViTB16, R26ViTS32, R50ViTL32" if hybrid else "ViTTi16 ... ViTH14"
            raise ValueError(
                f"The preset {weights!r} names the checkpoint of a registered variant, and this model's "
                f"shape is none of them: build it with a named builder ({kind}) or pass the path of a file."
            )
        return fetch(presets.find(variant, weights, image_size))
    raise ValueError(
        "`weights` must be None, a local file or folder, a preset tag "
        f"({', '.join(presets.tags())}) or 'hf://ORG/NAME'. Received: weights={weights!r} (no such file)"
    )


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
