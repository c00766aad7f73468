"""The one generic constructor (:func:`build_model`) and the builder factory every public builder is made by.

A builder (``ViT``, ``ViTB16``, ``HybridViT``, ``conv_stem_vit``...) is a row of data: which
:class:`~keras_vit.architecture.config.ViTConfig` fields it takes positionally, which it fixes
(a variant's sizes, a hybrid's stem) and its defaults. Its keyword arguments are the config's fields
plus ``weights``, ``input_tensor`` and ``name``, checked by the config before anything is built, and
its signature (``help(keras_vit.ViTB16)``, ``inspect.signature``) is made from the same data, so the
argument list is written once, in :class:`~keras_vit.architecture.config.ViTConfig`.
"""

import dataclasses
import inspect

from keras_vit import weights as weights_lib
from keras_vit.architecture import arguments
from keras_vit.architecture.config import ViTConfig, field_names
from keras_vit.architecture.stems import STEM_FIELDS
from keras_vit.architecture.model import VisionTransformer
from keras_vit.weights import declared, sources

# what a builder takes besides the architecture: the weights to load, an input tensor, the model's name
NOT_ARCHITECTURE = ("weights", "input_tensor", "name")
# keras.applications' names of two config fields, taken by every builder: classes (num_classes), input_shape (image_size)
APPLICATIONS_ALIASES = ("classes", "input_shape")


def applications_aliases(given, builder_name="ViT"):
    """``given`` (a builder's arguments) with ``keras.applications``' ``classes`` and ``input_shape`` as
    the config's ``num_classes`` and ``image_size``; one given twice with two values is refused.

    ``input_shape`` is ``(height, width, 3)``; ``(None, None, 3)`` is ``image_size=None`` (any size).

    Example:
    >>> applications_aliases({"classes": 10, "input_shape": (384, 384, 3)})
    {'num_classes': 10, 'image_size': (384, 384)}
    >>> applications_aliases({"input_shape": (224, 224, 1)})
    Traceback (most recent call last):
    ...
    ValueError: ViT takes RGB images: input_shape must be (height, width, 3). Received: input_shape=(224, 224, 1)
    """
    given = dict(given)
    if given.get("classes") is not None:
        classes = given.pop("classes")
        if "num_classes" in given and given["num_classes"] != classes:
            raise ValueError(
                f"`classes` is keras.applications' name for `num_classes`: give one. "
                f"Received: classes={classes!r}, num_classes={given['num_classes']!r}"
            )
        given["num_classes"] = classes
    given.pop("classes", None)
    shape = given.pop("input_shape", None)
    if shape is not None:
        if not isinstance(shape, (tuple, list)) or len(shape) != 3 or shape[-1] != 3:
            raise ValueError(f"{builder_name} takes RGB images: input_shape must be (height, width, 3). "
                             f"Received: input_shape={shape!r}")
        try:
            size = None if tuple(shape[:2]) == (None, None) else arguments.positive_pair(tuple(shape[:2]), "input_shape")
        except ValueError:
            raise ValueError(f"`input_shape` must be (height, width, 3) with positive height and width, or "
                             f"(None, None, 3) for any size. Received: input_shape={shape!r}") from None
        if "image_size" in given and given["image_size"] is not None and size is not None:
            same = arguments.positive_pair(given["image_size"], "image_size") == size
        else:
            same = "image_size" not in given or given["image_size"] == size
        if not same:
            raise ValueError(
                f"`input_shape` (keras.applications) and `image_size` name the same size: give one, or the same. "
                f"Received: input_shape={shape!r}, image_size={given['image_size']!r}"
            )
        given["image_size"] = size
    return given


def resolve_weights(weights, config, variant=None):
    """``weights`` as a local path (or None), before anything is built: a preset tag of ``variant``
    (default: the config's registered variant) is downloaded for the size nearest the config's native size.
    See :func:`keras_vit.weights.sources.resolve` for what is accepted and the errors raised."""
    variant = variant or config.variant
    return sources.resolve(weights, variant=variant, hybrid=config.stem == "resnet", image_size=config.native_image_size)


def fit_to_checkpoint(config, info, source, given=()):
    """``config`` with what the checkpoint ``info`` decides besides its shapes, checked before building.

    A pre-logits layer in the file is added when ``representation_size`` is None; the fields the file
    declares that a builder takes from it (:data:`keras_vit.weights.declared.ADOPTED`: the LayerNorm epsilon,
    1e-12 in transformers' ports) are taken unless the caller set them (``given``); a hybrid's ResNet stages
    must be the file's. Then every field the file declares is compared with the result
    (:func:`keras_vit.weights.declared.check`): a number of heads, an activation, or an epsilon the caller
    set that the file contradicts is refused, naming each, before anything is built.
    """
    changes = {}
    if config.stem == "resnet":
        weights_lib.check_hybrid_stages(info.shapes, config.block_units, str(source))
    if config.representation_size is None:
        changes["representation_size"] = weights_lib.representation_size_of(info.shapes)
    config = declared.adopt(config.replace(**changes) if changes else config, info.declared, given)
    declared.check(info.declared, config, source)
    return config


def build_model(config, *, weights=None, input_tensor=None, name=None, variant=None, info=None, given=None):
    """The model ``config`` describes, with ``weights`` (a path, preset tag or ``hf://`` name) loaded.

    Args:
        config: a :class:`~keras_vit.architecture.config.ViTConfig` (or its dict).
        weights: None (random initialisation), or what :func:`resolve_weights` accepts.
        input_tensor: optional Keras tensor to use as the model input.
        name: the model's name (default: the config's :attr:`~ViTConfig.default_name`).
        variant: the registered variant whose preset tags ``weights`` names (default: the config's).
        info: the :class:`~keras_vit.weights.formats.CheckpointInfo` of ``weights`` when the caller has
            already read it (not read twice).
        given: the names of the config's fields the caller chose; a field the file declares and the caller
            did not choose is taken from the file where a builder does (the LayerNorm epsilon). None: every
            field was chosen (the config is the caller's own), and a file that declares another is refused.

    Returns:
        A :class:`~keras_vit.architecture.model.VisionTransformer`; with ``weights``, the report of the
        load is ``model.load_report``.

    Example:
    >>> model = build_model(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4,
    ...                               mlp_dim=64, num_classes=3))
    >>> model.vit_config.num_classes, model.output_shape
    (3, (None, 3))
    """
    config = ViTConfig.from_dict(config)
    if input_tensor is not None and config.input_mode == "image":
        check_input_tensor(input_tensor, config)
    path = resolve_weights(weights, config, variant)
    if path is not None:
        info = info or weights_lib.describe(path)  # shapes and settings only, no tensor data
        config = fit_to_checkpoint(config, info, path, given=field_names() if given is None else given)
    model = VisionTransformer.from_vit_config(config, input_tensor=input_tensor, name=name)
    if path is not None:
        weights_lib.load_into(model, path, info=info)
    return model


def check_input_tensor(tensor, config):
    """Refuse an ``input_tensor`` that is no batch of RGB images of ``config``'s size (a channel count other than 3
    was built and predicted uniform scores; another size failed deep in the patch encoder), before anything is built.

    Example:
    >>> import keras
    >>> check_input_tensor(keras.Input((32, 32, 1)), ViTConfig(image_size=32, patch_size=8))
    Traceback (most recent call last):
    ...
    ValueError: `input_tensor` must be a batch of RGB images, (batch, height, width, 3). Received: input_tensor of shape (None, 32, 32, 1)
    """
    shape = tuple(getattr(tensor, "shape", None) or ())
    if len(shape) != 4 or shape[-1] != 3:
        raise ValueError(f"`input_tensor` must be a batch of RGB images, (batch, height, width, 3). "
                         f"Received: input_tensor of shape {shape}")
    size = tuple(shape[1:3])
    if config.image_size is not None and None not in size and size != tuple(config.image_size):
        raise ValueError(f"`input_tensor` holds {size[0]}x{size[1]} images; the model is built for image_size="
                         f"{config.image_size!r}: pass image_size={size!r}. Received: input_tensor of shape {shape}")


def make_builder(builder_name, *, doc, positional=(), fixed=None, defaults=None, variant=None, default_name=None):
    """A public builder: ``builder(*positional, weights=None, input_tensor=None, name=None, **fields)``.

    ``fields`` are the config's, and ``keras.applications``' ``classes`` and ``input_shape``
    (:func:`applications_aliases`).

    Args:
        builder_name: its ``__name__`` (``"ViTB16"``).
        doc: its docstring.
        positional: the config fields it takes positionally, in order (keras.applications style: at most two).
        fixed: fields it sets and refuses from the caller (a variant's sizes, a hybrid's stem); ``patch_size``
            among them may still be given (another patch size for the variant's checkpoint, FlexiViT).
        defaults: its own defaults for other fields (e.g. ``num_classes=10``).
        variant: the registered variant whose preset tags ``weights`` names.
        default_name: the model's name when none is given (default: the config's).
    """
    fixed, defaults = dict(fixed or {}), dict(defaults or {})
    other_stems = [name for stem, names in STEM_FIELDS.items() if "stem" in fixed and stem != fixed["stem"] for name in names]
    free = [name for name in field_names() if (name not in fixed or name == "patch_size") and name not in other_stems]

    def builder(*args, weights=None, input_tensor=None, name=None, **fields):
        if len(args) > len(positional):
            raise TypeError(f"{builder_name}() takes {len(positional)} positional argument(s) ({', '.join(positional)}); "
                            f"the others are keyword-only. Received: {len(args)} positional")
        given = dict(zip(positional, args))
        twice = sorted(set(given) & set(fields))
        if twice:
            raise TypeError(f"{builder_name}() got multiple values for argument(s) {twice}")
        given.update(fields)
        given = applications_aliases(given, builder_name)
        refused = sorted(set(given) & (set(fixed) - {"patch_size"}))
        if refused:
            raise ValueError(
                f"{builder_name} fixes {', '.join(f'{k}={fixed[k]!r}' for k in refused)}; build another architecture "
                f"with keras_vit.ViT or keras_vit.HybridViT. Received: {', '.join(f'{k}={given[k]!r}' for k in refused)}"
            )
        unknown = sorted(set(given) - set(free))
        if unknown:
            raise ValueError(
                f"Unknown argument(s) {unknown} for {builder_name}; accepted: "
                f"{', '.join(free + list(NOT_ARCHITECTURE + APPLICATIONS_ALIASES))}"
            )
        config = ViTConfig(**{**defaults, **fixed, **given})
        arguments.refuse_one_class_softmax(config)
        return build_model(config, weights=weights, input_tensor=input_tensor, name=name or default_name,
                           variant=variant, given=frozenset(given) | frozenset(fixed))

    builder.__name__ = builder.__qualname__ = builder_name
    builder.__doc__ = doc
    builder.__signature__ = _signature(positional, free, {**fixed, **defaults})
    return builder


def _signature(positional, free, defaults):
    base = {field.name: field.default for field in dataclasses.fields(ViTConfig)}
    default = lambda name: defaults.get(name, base[name])  # noqa: E731
    params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default(name)) for name in positional]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in NOT_ARCHITECTURE + APPLICATIONS_ALIASES]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default(name)) for name in free
               if name not in positional]
    return inspect.Signature(params)
