"""What ``weights=`` may name, turned into a local path: the one entry point the builders call."""

import os

from keras_vit.fetch import hub, kaggle
from keras_vit.weights import download, presets

HF_PREFIX = "hf://"
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
        return download.fetch(presets.find(variant, weights, image_size))
    raise ValueError(
        "`weights` must be None, a local file or folder, a preset tag "
        f"({', '.join(presets.tags())}) or 'hf://ORG/NAME'. Received: weights={weights!r} (no such file)"
    )
