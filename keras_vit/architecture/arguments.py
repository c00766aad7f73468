"""Argument checks shared by the builders, run before anything is built.

Each raises a ``ValueError`` that names the argument and the value received,
as ``keras.applications`` does.
"""

import numbers

import keras

from keras_vit.domains import POSITIVE_INT

# class token, mean of the patch tokens, attention pooling (SigLIP), [class token; mean of the patch tokens] (DINOv2's
# classifier), and keras.applications' "avg" and "max" (mean, maximum of the patch tokens; the class token kept)
POOLING_MODES = ("token", "gap", "map", "token_gap_concat", "avg", "max")
# what include_top=False also takes: the token sequence (None) and the patch tokens on their grid (keras.applications' map)
NO_TOP_OUTPUTS = (None, "feature_map")
DEFAULT_IMAGE_SIZE = 224  # the builders' image_size, and the native size of an image_size=None model


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(value, name):
    """``value`` as an int if it is a positive integer (not a bool, float or str), else a ``ValueError``.

    Example:
    >>> positive_int(12, "num_layers")
    12
    >>> positive_int(0, "num_layers")
    Traceback (most recent call last):
    ...
    ValueError: `num_layers` must be a positive int. Received: num_layers=0
    """
    return POSITIVE_INT.check(value, name)


def positive_ints(values, name):
    """A tuple of positive ints (possibly empty), e.g. ResNet stage sizes; else a ``ValueError`` naming ``values``.

    Example:
    >>> positive_ints([3, 4, 9], "block_units")
    (3, 4, 9)
    """
    if not isinstance(values, (tuple, list)) or not all(_is_int(v) and v >= 1 for v in values):
        raise ValueError(f"`{name}` must be a tuple of positive ints. Received: {name}={values!r}")
    return tuple(int(v) for v in values)


def positive_pair(value, name):
    """``224 -> (224, 224)``; ``(h, w)`` of positive ints is kept; a str, float or bool is refused.

    Example:
    >>> positive_pair(224, "image_size"), positive_pair([32, 48], "image_size")
    ((224, 224), (32, 48))
    >>> positive_pair("64", "image_size")
    Traceback (most recent call last):
    ...
    ValueError: `image_size` must be a positive int or a (height, width) pair of them. Received: image_size='64'
    """
    if _is_int(value):
        pair = (value, value)
    elif isinstance(value, (tuple, list)):
        pair = tuple(value)
    else:
        pair = ()
    if len(pair) != 2 or not all(_is_int(v) and v >= 1 for v in pair):
        raise ValueError(f"`{name}` must be a positive int or a (height, width) pair of them. Received: {name}={value!r}")
    return tuple(int(v) for v in pair)


def validate_transformer(hidden_size, num_layers, num_heads, mlp_dim):
    """Check the Transformer's shape: positive ints, ``hidden_size`` divisible by ``num_heads``."""
    for value, name in ((hidden_size, "hidden_size"), (num_layers, "num_layers"), (num_heads, "num_heads"), (mlp_dim, "mlp_dim")):
        positive_int(value, name)
    if hidden_size % num_heads:
        raise ValueError(
            "`hidden_size` must be divisible by `num_heads`. "
            f"Received: hidden_size={hidden_size}, num_heads={num_heads}"
        )


def stored_image_size(image_size, native_image_size, default=DEFAULT_IMAGE_SIZE):
    """The image size a model's position embeddings are stored for, and the argument that set it.

    ``image_size`` itself; for ``image_size=None`` (any size at call time) the
    ``native_image_size``, by default ``default``. A ``native_image_size`` given
    with a fixed ``image_size`` is refused.

    Example:
    >>> stored_image_size(384, None), stored_image_size(None, None), stored_image_size(None, 384)
    ((384, 'image_size'), (224, 'native_image_size'), (384, 'native_image_size'))
    """
    if image_size is None:
        return (default if native_image_size is None else native_image_size), "native_image_size"
    if native_image_size is not None:
        raise ValueError(
            "`native_image_size` is the size whose grid the position embeddings of an image_size=None model "
            f"are stored for. Received: image_size={image_size!r}, native_image_size={native_image_size!r}"
        )
    return image_size, "image_size"


def whole_patches(image_size, patch_size):
    """``(h, w)`` cropped to the whole patches it holds (at least one patch each way, else the size as given).

    Example:
    >>> whole_patches(384, 14)
    (378, 378)
    """
    (h, w), (ph, pw) = positive_pair(image_size, "image_size"), positive_pair(patch_size, "patch_size")
    return (h // ph * ph or h, w // pw * pw or w)


def validate_grid(image_size, patch_size, stride=1, context="", name="image_size"):
    """Check that ``image_size`` is cut into whole patches (after a backbone of total ``stride``); return both pairs."""
    h, w = positive_pair(image_size, name)
    ph, pw = positive_pair(patch_size, "patch_size")
    if h % (stride * ph) or w % (stride * pw):
        what = "the patch size" if stride == 1 else f"the backbone stride times the patch size ({stride} x {(ph, pw)}{context})"
        raise ValueError(
            f"The image size must be divisible by {what}. Received: {name}={image_size}, patch_size={patch_size}"
        )
    return (h, w), (ph, pw)


def validate_top(num_classes, include_top, pooling, classifier_activation):
    """Check the head arguments shared by every builder, before building."""
    if pooling not in POOLING_MODES and not (pooling in NO_TOP_OUTPUTS and not include_top):
        if pooling in NO_TOP_OUTPUTS:
            raise ValueError(
                f"pooling={pooling!r} returns tokens, not a vector a head can classify: it needs include_top=False. "
                f"Received: pooling={pooling!r}, include_top={include_top!r}"
            )
        allowed = POOLING_MODES + (NO_TOP_OUTPUTS if not include_top else ())
        raise ValueError(f"Unknown pooling type: expected one of {allowed}. Received: pooling={pooling!r}")
    if include_top and (not _is_int(num_classes) or num_classes < 1):
        raise ValueError(f"`num_classes` must be a positive int when include_top=True. Received: num_classes={num_classes!r}")
    if classifier_activation is not None:
        keras.activations.get(classifier_activation)  # raises on an unknown name


def refuse_one_class_softmax(config):
    """A builder's check (files that hold such a head still load): a softmax over one class is 1.0 for every image."""
    if config.include_top and config.num_classes == 1 and config.classifier_activation == "softmax":
        raise ValueError("A softmax over one class is 1.0 for every image: a binary classifier of one output takes "
                         "classifier_activation='sigmoid' (its probability) or None (its logit), or num_classes=2. "
                         "Received: num_classes=1, classifier_activation='softmax'")
