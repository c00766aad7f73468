"""``keras_vit.from_pretrained(source, **overrides)``: the model a checkpoint describes, built and loaded.

The builders (``keras_vit.ViTB16(weights=...)``) load weights into the
architecture the user chose; :func:`from_pretrained` reads the architecture
from the source itself (:func:`keras_vit.weights.architecture.infer`), so a
timm or transformers model of any size, a hybrid ``.npz`` or a preset builds
with one call. The class names the source carries go with the model
(``model.class_names``, then into a saved ``.keras`` by ``keras-vit convert``).
"""

import dataclasses
import functools
import os
import warnings

from keras_vit.architecture import variants
from keras_vit.architecture.arguments import refuse_one_class_softmax, whole_patches
from keras_vit.architecture.config import ViTConfig
from keras_vit.errors import CheckpointError
from keras_vit.models import naflex_conversion
from keras_vit.models.build import build_model
from keras_vit.weights import architecture, declared, formats, imagenet, keras_file, presets, sources

# read from the checkpoint: an override must agree with the file (the family's switches included)
FROM_FILE = (
    "patch_size", "hidden_size", "num_layers", "mlp_dim", "num_heads", "representation_size", "block_units", "width",
) + architecture.CONV_STEM + architecture.FAMILY
# free to choose: the head, the resolution, regularisation, the input, the name
OVERRIDES = (
    "num_classes", "image_size", "include_top", "pooling", "dropout", "attention_dropout", "drop_path_rate",
    "classifier_activation", "include_preprocessing", "input_tensor", "name", "input_mean", "input_std",
    "position_resampling", "max_patches",
)
PRESET_EXAMPLE = "B/16:augreg_in21k_ft_in1k"


def from_pretrained(source, **overrides):
    """Build the ViT that ``source`` describes and load its weights.

    Args:
        source: one of
            - a local original ``.npz`` (plain or hybrid), a timm ``.safetensors`` (with its
              ``config.json`` beside it, if any), a transformers ``save_pretrained`` folder, or a
              keras-hub ViT preset folder (``ViTBackbone`` / ``ViTImageClassifier``,
              :mod:`keras_vit.weights.keras_hub`);
            - ``"hf://ORG/NAME[@revision]"``: a timm or transformers repository or a keras-hub preset
              on the Hugging Face Hub (through its cache, see :mod:`keras_vit.fetch.hub`);
            - ``"kaggle://OWNER/MODEL/keras/VARIATION[/VERSION]"``: a keras-hub preset on Kaggle
              Models (through kagglehub's cache, :mod:`keras_vit.fetch.kaggle`);
            - ``"VARIANT:TAG"``, a preset (``"B/16:augreg_in21k_ft_in1k"``,
              ``"R50+B/16:imagenet21k"``; ``keras-vit info --presets`` lists them), downloaded
              once into the Keras cache; the file of the resolution nearest ``image_size``;
            - a named family preset (``"dinov2_vits14"``, ``"clip_vitb16_openai"``...), a timm Hub
              repository fetched through huggingface_hub's cache as ``hf://`` is.
        **overrides: ``num_classes`` (another number than the file's: a new, zero-initialised
            head for fine-tuning), ``image_size`` (position embeddings resampled in 2-D),
            ``include_top``, ``pooling`` (None with ``include_top=False``: the token sequence),
            ``max_patches`` (a NaFlex model's budget; with SigLIP 2's weights, or ``input_mode="naflex"``, it
            reads them as the NaFlex model rather than at their table's grid; with a classic ViT's, as the NaFlex
            model timm builds from them with ``use_naflex=True``: :mod:`keras_vit.models.naflex_conversion`),
            ``dropout``, ``attention_dropout``, ``drop_path_rate``, ``classifier_activation``
            (default ``"softmax"``), ``include_preprocessing``, ``input_tensor``, ``name``; and
            ``num_heads`` for a timm file without a config naming it. The sizes fixed by the
            weights (``patch_size``, ``hidden_size``, ``num_layers``, ``mlp_dim``,
            ``representation_size``, a hybrid's ``block_units`` and ``width``, the family's switches:
            tokens, LayerScale, activation, MLP type, q/k/v bias, norms, projection) may be given
            only with the file's values.

    A keras_vit ``.keras`` file is built with the ``ViTConfig`` it was saved with (every switch of the
    family, a conv stem), the overrides applied.

    Returns:
        A functional ``keras.Model`` with ``model.load_report`` (what was loaded, resized,
        skipped, from where) and, when the source names its classes and the head is its own,
        ``model.class_names`` (transformers ``id2label``, timm ``label_names``, ImageNet-1k or
        -21k names for a head trained on it).

    Raises:
        ValueError: ``source`` is none of the above; the architecture cannot be read from it
            (the message names the source and what is missing); an override contradicts the
            weights or is unknown. :class:`~keras_vit.weights.CheckpointError` (a ``ValueError``)
            for a file that cannot be read or loaded.

    Example:
    >>> model = keras_vit.from_pretrained("hf://google/vit-base-patch16-224")  # doctest: +SKIP
    >>> model.class_names[:2]  # doctest: +SKIP
    ['tench, Tinca tinca', 'goldfish, Carassius auratus']
    >>> model = keras_vit.from_pretrained("B/16:augreg_in21k_ft_in1k", num_classes=10, image_size=384)  # doctest: +SKIP
    """
    path, preset = locate(source, overrides.get("image_size"))
    info = formats.describe(path, architecture=getattr(preset, "architecture", None))  # a Hub preset may name one
    if info.naflex is not None and (overrides.get("max_patches") is not None or overrides.get("input_mode") == "naflex"):
        info = info.as_naflex()  # SigLIP 2's weights as the NaFlex model: each image at its own grid
    saved = saved_config(path, info)
    arch = saved_architecture(saved) if saved else architecture.infer(info, str(source), known_heads=_registered_heads())
    if naflex_conversion.asked(info, arch, overrides):  # a classic ViT as timm's use_naflex=True model
        arch, info = naflex_conversion.convert(arch, info, str(source), overrides)
    kwargs = arguments(arch, overrides, source, no_head=[f"{k}: {v}" for k, v in info.skipped.items() if k.startswith("head")])
    for field, value in (("input_mean", info.mean), ("input_std", info.std), ("position_resampling", info.position_resampling)):
        if value is not None and field not in overrides:  # the source's preprocessing and resampling rule
            kwargs[field] = tuple(value) if isinstance(value, list) else value
    own_head = kwargs.get("include_top", True) and kwargs.get("num_classes") == arch["num_classes"]
    adopted_activation = bool(info.classifier_activation) and own_head and "classifier_activation" not in overrides
    if adopted_activation:  # the source's own head keeps the activation the source declares (keras-hub's task.json)
        kwargs["classifier_activation"] = info.classifier_activation[0]
    one_logit = saved is None and kwargs.get("include_top", True) and kwargs.get("num_classes") == 1 and "classifier_activation" not in kwargs
    if one_logit:  # a head of one output (transformers' num_labels=1: a regression or binary head): its logit
        kwargs["classifier_activation"] = None
    name, input_tensor = kwargs.pop("name", None), kwargs.pop("input_tensor", None)
    if saved is not None:  # a keras_vit model: its whole architecture (the family's switches, a stem), the overrides applied
        build = saved.replace
    else:
        build = functools.partial(ViTConfig, stem="resnet" if "block_units" in kwargs else kwargs.pop("stem", None))
    try:
        config = build(**kwargs)
    except ValueError as error:  # a value the file declares that keras_vit has no layer for: the file's field named
        said = _declared_at_fault(build, kwargs, info.declared)
        if said:
            raise CheckpointError(
                f"Checkpoint {path!r} declares what keras_vit cannot build: {'; '.join(said)} ({error})"
            ) from error
        raise
    if "classifier_activation" in overrides:
        refuse_one_class_softmax(config)
    model = build_model(config, weights=path, info=info, input_tensor=input_tensor, name=name, given=frozenset(kwargs))
    model.load_report.source = str(source)
    if one_logit:
        model.load_report.notes.append("classifier_activation=None: a head of one output gives its logit (a softmax "
                                       "over one class is 1.0; pass classifier_activation='sigmoid' for a probability)")
    if adopted_activation:
        model.load_report.notes.append(f"classifier_activation={kwargs['classifier_activation']!r}: the head's activation "
                                       f"the source declares ({info.classifier_activation[1]})")
    if own_head:
        tag = getattr(preset, "tag", None) if preset else info.tag or _hub_tag(source)
        names = class_names_of(info, arch["num_classes"], tag)
        if names:
            model.class_names = names
    return model


def _declared_at_fault(build, kwargs, record):
    """``["config.json: hidden_act='relu'", ...]``: the declarations of ``record`` that alone make ``build(**kwargs)``
    fail, each found by building with that field at ``ViTConfig``'s default and the rest as they are."""
    defaults = {field.name: field.default for field in dataclasses.fields(ViTConfig)}
    at_fault = []
    for field, declaration in record.items():
        if field not in kwargs or field not in defaults or kwargs[field] == defaults[field]:
            continue
        try:
            build(**{**kwargs, field: defaults[field]})
        except ValueError:
            continue
        at_fault.append(f"{declaration.origin}: {declaration.said}")
    return at_fault


def saved_config(path, info):
    """The ``ViTConfig`` a keras_vit ``.keras`` source was saved with, or None for another format."""
    return keras_file.contents(path)[1] if info.format == keras_file.FORMAT else None


def saved_architecture(config):
    """What :func:`~keras_vit.weights.architecture.infer` reads from a checkpoint, read from a saved ``ViTConfig``."""
    arch = {k: getattr(config, k) for k in ("patch_size", "hidden_size", "num_layers", "mlp_dim", "num_heads", "representation_size", "pooling")}
    arch["image_size"] = config.image_size  # None: the saved model takes any size, and so does the new one
    arch["crop_remainder"] = config.crop_remainder
    arch["num_classes"] = config.num_classes if config.include_top else None
    arch.update({k: getattr(config, k) for k in architecture.FAMILY})  # the family's switches it was saved with
    if config.stem == "resnet":
        arch.update(block_units=config.block_units, width=config.width)
    if config.stem == "conv":
        arch.update({"stem": "conv", **{k: getattr(config, k) for k in architecture.CONV_STEM}})
    return arch


def locate(source, image_size=None):
    """``(local path, preset or None)`` of a :func:`from_pretrained` source, downloading what needs it."""
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"`source` must be a path, 'hf://ORG/NAME' or a preset 'VARIANT:TAG'. Received: {source!r}")
    if os.path.exists(os.fspath(source)):
        return os.fspath(source), None
    source = os.fspath(source)
    if source.startswith((sources.HF_PREFIX, sources.KAGGLE_PREFIX)):
        return sources.resolve(source), None
    hub_preset = presets.hub_preset(source)
    if hub_preset:  # a named family preset: a timm Hub repository, through huggingface_hub's cache
        return sources.resolve(sources.HF_PREFIX + hub_preset.repo), hub_preset
    written, colon, tag = source.rpartition(":")
    variant = presets.variant_named(written) if colon else None
    if variant:
        preset = presets.find(variant, tag, image_size)  # a tag this variant lacks: the error lists its tags
        return sources.fetch(preset), preset
    with_presets = ", ".join(dict.fromkeys(p.variant for p in presets.PRESETS))
    hint = ""
    if presets.is_tag(tag):
        needs = f" A preset tag needs its variant: B/16:{tag}."
        hint = f" {written!r} is no variant with presets." if written else needs
    raise ValueError(
        f"from_pretrained: {source!r} is neither a file, a folder, 'hf://ORG/NAME' nor a preset 'VARIANT:TAG' "
        f"(e.g. {PRESET_EXAMPLE!r}; variants with presets: {with_presets}; tags: {', '.join(presets.tags())}) "
        f"nor a named preset ({', '.join(presets.hub_names())}).{hint}"
    )


def arguments(arch, overrides, source, no_head=()):
    """Builder keyword arguments: the architecture ``arch`` read from ``source``, with ``overrides`` checked and applied
    (``no_head``: why the source's own head was left out, named when a head is asked for without ``num_classes``)."""
    if "weights" in overrides:
        raise ValueError(f"from_pretrained loads the weights of {str(source)!r}; it takes no `weights` argument.")
    unknown = sorted(set(overrides) - set(FROM_FILE) - set(OVERRIDES))
    if unknown:
        raise ValueError(
            f"Unknown argument(s) {unknown} for from_pretrained({str(source)!r}); "
            f"accepted: {', '.join(OVERRIDES)} (and {', '.join(FROM_FILE)} equal to the file's)."
        )
    for name in FROM_FILE:
        have = arch.get(name)  # None: the file has none (no pre-logits, no ResNet), or, for num_heads, unknown
        known = have is not None or name != "num_heads"
        if name in overrides and known and _normal(overrides[name]) != _normal(have):
            raise ValueError(
                f"{str(source)!r} has {name}={have!r}, fixed by its weights. Received: {name}={overrides[name]!r}"
            )
    kwargs = {k: arch[k] for k in ("patch_size", "hidden_size", "num_layers", "mlp_dim", "image_size", "representation_size")}
    kwargs.update({k: arch[k] for k in ("block_units", "width", "stem", *architecture.CONV_STEM) if k in arch})
    kwargs.update({k: arch[k] for k in architecture.FAMILY if k in arch})
    if arch.get("crop_remainder"):  # a stated size the patches do not divide: cropped as the source's convolution does
        kwargs["crop_remainder"] = True
    kwargs["num_heads"] = overrides.get("num_heads", arch["num_heads"])
    if kwargs["num_heads"] is None:
        raise ValueError(
            f"Cannot tell the number of attention heads of {str(source)!r}: its attention weights store the heads "
            f"merged (width {arch['hidden_size']}), no config.json names them (timm 'architecture' or "
            "'model_args.num_heads') and its sizes are no registered variant's. "
            f"Pass them: from_pretrained({str(source)!r}, num_heads=...)."
        )
    kwargs.update({k: v for k, v in overrides.items() if k in OVERRIDES})
    if "image_size" in overrides and overrides["image_size"] is None and arch["image_size"] is not None:
        # any size: the table stays at the grid it was trained for (in whole patches), resampled once per input; the
        # default native 224 resampled a 256 model's table to 224's grid and back (3.2 % off timm's at 256)
        size = arch["image_size"]  # a size the patches do not divide (so400m/14 at 384): its whole patches' (378)
        kwargs["native_image_size"] = whole_patches(size, arch["patch_size"]) if kwargs.get("crop_remainder") else size
        kwargs["crop_remainder"] = False  # said, for a saved config that crops
    num_classes = overrides.get("num_classes", arch["num_classes"])
    kwargs["include_top"] = overrides.get("include_top", num_classes is not None)
    if kwargs["include_top"] and num_classes is None:
        raise ValueError(
            f"{str(source)!r} has no classification head{' keras_vit can load (' + '; '.join(no_head) + ')' if no_head else ''}: "
            "pass num_classes=N for a new, zero-initialised head, or include_top=False for the pooled features."
        )
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    pooling = overrides.get("pooling", arch["pooling"])
    outputs = (None, *declared.OUTPUT_POOLINGS)  # weight-free outputs of a model without a head
    if pooling != arch["pooling"] and not (pooling in outputs and not kwargs["include_top"]):
        raise ValueError(
            f"{str(source)!r} was trained with pooling={arch['pooling']!r} "
            f"({_POOLED.get(arch['pooling'], arch['pooling'])}); with include_top=False, None (the token sequence: "
            "its first is the class token where the model has one), 'avg', 'max' or 'feature_map' may replace it. "
            f"Received: pooling={pooling!r}"
        )
    kwargs["pooling"] = pooling
    if pooling != "map":  # the attention pooling head's sizes go with it (its weights are left out)
        kwargs.update(map_num_heads=None, map_mlp_dim=None)
    if pooling != arch["pooling"]:  # so does the file's pooling's token set: avg and max read the patch tokens
        kwargs["pool_include_prefix"] = False
    if pooling in declared.TOKEN_OUTPUTS and not kwargs["include_top"]:  # the tokens: nothing acts on a pooled vector
        kwargs.update(fc_norm=False, projection_dim=None)  # (timm's forward_features: fc_norm comes after pooling)
    return kwargs


_POOLED = {"token": "the class token", "gap": "the mean of the tokens", "map": "attention pooling"}


def class_names_of(info, num_classes, tag=None):
    """Names of a source head's ``num_classes`` classes, or None.

    The file's own (transformers ``id2label``, timm ``label_names``), else the ImageNet-1k or -21k
    names when ``tag`` (a preset's, a timm ``pretrained_cfg.tag``) says the head was trained on
    that dataset (:func:`keras_vit.weights.imagenet.imagenet_dataset_of`).
    """
    if info.class_names and len(info.class_names) == num_classes:
        return [str(name) for name in info.class_names]
    if info.class_names:
        warnings.warn(
            f"{info.path!r} names {len(info.class_names)} classes but its head has {num_classes} outputs; the model "
            "gets no class names from the file (pass labels= to predict and export).",
            UserWarning,
            stacklevel=3,
        )
    dataset = imagenet.imagenet_dataset_of(tag, num_classes)
    return imagenet.imagenet_labels(dataset) if dataset else None


def _hub_tag(source):
    """The pretrained tag in a timm Hub name, or None.

    Example:
    >>> _hub_tag("hf://timm/vit_base_patch16_224.augreg2_in21k_ft_in1k@main"), _hub_tag("hf://google/vit-base-patch16-224")
    ('augreg2_in21k_ft_in1k', None)
    """
    source = str(source)
    if not source.startswith(sources.HF_PREFIX):
        return None
    name = source.partition("@")[0].rpartition("/")[2]
    return name.partition(".")[2] or None


def _registered_heads():
    return {(c["hidden_size"], c["num_layers"], c["mlp_dim"]): c["num_heads"] for c in variants.VARIANTS.values()}


def _normal(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value
