"""A foreign model's input normalisation: where it is read (timm's ``pretrained_cfg.mean`` / ``std``, a
transformers ``preprocessor_config.json``), its check, and its folding into the patch embedding for a model that
scales its pixels otherwise (:func:`fold_normalization`; exact: the embedding is linear).
"""

import os

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib


TRANSFORMERS_RESCALE = 1 / 255  # BaseImageProcessor's rescale_factor when a preprocessor_config.json has none


def channels(value, file, field, positive=False):
    """3 floats of ``value`` (a number for every channel, or 3), or an error naming ``file`` and ``field``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # one number for every channel, as
        value = [value] * 3  # transformers' image processors broadcast a float image_mean / image_std
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value)
        or (positive and min(value) <= 0)
    ):
        raise CheckpointError(
            f"{file!r}: {field}={value!r}, expected 3 {'positive ' if positive else ''}numbers, one per RGB channel."
        )
    return [float(v) for v in value]


def processor_normalization(processor, file, mean, std):
    """``(mean, std, said)`` in keras_vit's terms (``(x / 255 - mean) / std`` on [0, 255] pixels) of a transformers
    ``preprocessor_config.json``: what its image processor feeds the model, ``(x * rescale_factor - image_mean) /
    image_std``, with ``do_rescale`` and ``do_normalize`` honoured. ``mean`` / ``std``: the layout's defaults for a
    file that names no ``image_mean`` / ``image_std``; ``said``: None when the file says nothing of it.

    Example:
    >>> processor_normalization({"rescale_factor": 1 / 127.5, "image_mean": [1, 1, 1], "image_std": [1, 1, 1]},
    ...                         "p.json", [0.5] * 3, [0.5] * 3)[:2]
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    >>> processor_normalization({"image_mean": 0.5, "image_std": 0.5}, "p.json", [0, 0, 0], [1, 1, 1])[:2]
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    >>> processor_normalization({"do_normalize": False}, "p.json", [0.5] * 3, [0.5] * 3)[:2]
    ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    """
    said = []
    factor = TRANSFORMERS_RESCALE
    if processor.get("do_rescale", True) is False:
        factor, said = 1.0, ["do_rescale=false"]
    elif "rescale_factor" in processor:
        factor = config_lib.number(processor, "rescale_factor", None, file)  # 1/255 scales to [0, 1]
        if not np.isclose(factor, TRANSFORMERS_RESCALE, rtol=1e-6, atol=0):
            said.append(f"rescale_factor={processor['rescale_factor']!r}")
    if processor.get("do_normalize", True) is False:
        mean, std = [0.0] * 3, [1.0] * 3
        said.append("do_normalize=false")
    else:  # one without the other is still checked
        given = {field: channels(processor[field], file, field, field == "image_std")
                 for field in ("image_mean", "image_std") if processor.get(field) is not None}
        if len(given) == 2:
            mean, std = given["image_mean"], given["image_std"]
            said.append(f"image_mean={processor['image_mean']!r}, image_std={processor['image_std']!r}")
    scale = 255.0 * factor  # x * factor = (x / 255) * scale
    return [float(m) / scale for m in mean], [float(s) / scale for s in std], ", ".join(said) or None


def read_normalization(path, reading, config_path):
    """``reading`` (a :class:`~keras_vit.weights.source.Reading`) with its input mean and std checked: timm's
    ``pretrained_cfg``, else a transformers ``preprocessor_config.json`` next to the weights, if any."""
    where = (config_path, "pretrained_cfg.mean", "pretrained_cfg.std")
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    file = os.path.join(folder, "preprocessor_config.json")
    if reading.mean is None and os.path.isfile(file):
        mean, std, said = processor_normalization(config_lib.read_json(file), file, [0.5] * 3, [0.5] * 3)
        if said is not None:  # a file that says nothing of it: keras_vit's [-1, 1], transformers' ViT default too
            reading.mean, reading.std = mean, std
            where = (file, "image_mean", "image_std")
    for value, field in ((reading.mean, where[1]), (reading.std, where[2])):
        if value is not None:
            channels(value, where[0], field, field == where[2])
    return reading


def fold_normalization(arrays, mean, std, model_mean=None, model_std=None):
    """Make a model trained on ``(x / 255 - mean) / std`` inputs take ``(x / 255 - model_mean) / model_std``
    (default: keras_vit's ``x / 127.5 - 1``, ``model_mean = model_std = 0.5``).

    With ``u = (x / 255 - m') / s'``, ``(x / 255 - mean) / std = u s' / std + (m' - mean) / std``: the patch
    embedding's kernel is scaled per input channel and the constant goes into its bias. Nothing changes when the two
    agree (a model built with the file's ``input_mean`` and ``input_std``), or when ``mean`` and ``std`` are None.

    Example:
    >>> arrays = {"embedding/kernel": np.ones((1, 1, 3, 1)), "embedding/bias": np.zeros(1)}
    >>> out = fold_normalization(arrays, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    >>> out["embedding/kernel"].ravel().tolist(), out["embedding/bias"].tolist()
    ([0.5, 0.5, 0.5], [1.5])
    """
    if mean is None or std is None:
        return arrays
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    if mean.shape != (3,) or std.shape != (3,) or np.any(std <= 0):
        raise CheckpointError(f"Cannot use the input normalisation mean={mean.tolist()}, std={std.tolist()}.")
    model_mean = np.asarray(0.5 if model_mean is None else model_mean, np.float64) * np.ones(3)
    model_std = np.asarray(0.5 if model_std is None else model_std, np.float64) * np.ones(3)
    if np.allclose(mean, model_mean) and np.allclose(std, model_std):
        return arrays
    if "conv_root/kernel" in arrays or "stem/conv_0/kernel" in arrays:  # a stem first: a conv without bias, then a norm
        raise CheckpointError(
            f"A hybrid or conv-stem model trained on inputs normalised with mean={mean.tolist()}, std={std.tolist()} cannot take other "
            f"inputs (mean={model_mean.tolist()}, std={model_std.tolist()}): build it with input_mean and input_std "
            "equal to the file's (keras_vit.from_pretrained does)."
        )
    kernel = np.asarray(arrays["embedding/kernel"], np.float64)  # (P, P, C, D)
    scaled = kernel * (model_std / std)[None, None, :, None]
    shift = np.einsum("yxcd,c->d", kernel, (model_mean - mean) / std)
    return {**arrays, "embedding/kernel": scaled.astype(arrays["embedding/kernel"].dtype),
            "embedding/bias": (np.asarray(arrays["embedding/bias"], np.float64) + shift).astype(arrays["embedding/bias"].dtype)}
