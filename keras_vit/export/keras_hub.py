"""A keras_vit model as a keras-hub preset (``ViTBackbone`` + ``ViTImageClassifier``), keras-hub not imported.

``export_model(model, "keras-hub", DIR)`` writes what keras-hub's ``save_to_preset`` writes (its files and
variable paths: :mod:`keras_vit.weights.keras_hub.preset`), so ``keras_hub.models.ImageClassifier.from_preset(DIR)``
and ``keras_hub.models.Backbone.from_preset(DIR)`` load it: ``config.json``, ``model.weights.h5``,
``metadata.json`` (with the class names), ``task.json``, ``task.weights.h5``, ``preprocessor.json``,
``image_converter.json`` (the model's input scaling as keras-hub's ``scale`` and ``offset``) and a model card
``README.md``. keras-hub's ViT has a fixed image shape, a class token or a mean over every token, the paper's
block and nothing else: a model it cannot express (a hybrid or conv stem, a family switch it lacks, an any-size
model without ``image_size``) is refused with the reasons before anything is written.

The preset is written in a temporary folder beside ``DIR``, read back by keras_vit's own reader
(:mod:`keras_vit.weights.keras_hub`) and compared with the model on ``[0, 255]`` images; only then is it moved
to ``DIR``, which must not exist. The temporary folder is ``.DIR.tmp-<pid>-<random>``
(:func:`keras_vit.saving.temporary_path`): one that an export killed before it could clean up (SIGKILL, power
loss) left is removed by the next export to ``DIR``, which says so (the report's ``removed_stale``).
"""

import datetime
import json
import os
import shutil

import numpy as np

from keras_vit.architecture.model import config_of
from keras_vit.architecture.state import require_float
from keras_vit.export import verify
from keras_vit.export.errors import ExportError, ExportVerificationError
from keras_vit.saving import remove_stale_temporaries, temporary_path
from keras_vit.weights.keras_hub import preset as layout
from keras_vit.weights.mapping import POSEMB_KEY, targets_of

# what keras-hub's save_to_preset writes beside the files the reader reads (keras_vit.weights.keras_hub.preset)
PREPROCESSOR_FILE = "preprocessor.json"
README_FILE = "README.md"
PREPROCESSOR = "ViTImageClassifierPreprocessor"
MODULES = {  # each class's module, as keras.saving serialises it
    layout.BACKBONE: "keras_hub.src.models.vit.vit_backbone",
    layout.TASK: "keras_hub.src.models.vit.vit_image_classifier",
    PREPROCESSOR: "keras_hub.src.models.vit.vit_image_classifier_preprocessor",
    layout.IMAGE_CONVERTER: "keras_hub.src.models.vit.vit_image_converter",
}

FORMAT = "keras-hub"
_FLOAT32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
# the family's switches keras-hub's ViTBackbone lacks: (field, the paper's value, why)
_SWITCHES = (
    ("distillation_token", False, "DeiT's distillation token"),
    ("num_register_tokens", 0, "register tokens"),
    ("prefix_positions", True, "a class token without position embedding (timm's no_embed_class)"),
    ("layer_scale_init", None, "LayerScale"),
    ("mlp_activation", "gelu", "an MLP activation other than the exact GELU"),
    ("mlp_type", "mlp", "a gated (GLU) MLP"),
    ("qkv_bias", True, "query/key/value without biases beside an output bias (use_mha_bias drops both)"),
    ("pre_norm", False, "a LayerNorm before the blocks"),
    ("final_norm", True, "no LayerNorm after the blocks"),
    ("fc_norm", False, "a LayerNorm after pooling"),
    ("projection_dim", None, "a projection of the pooled vector"),
    ("rope", None, "rotary position embeddings (RoPE) in the attention"),
    ("position_embedding", True, "no learned position embeddings"),
    ("norm_type", "layernorm", "RMSNorm instead of LayerNorm"),
    ("patch_norm", False, "a norm of the patch embeddings"),
    ("proj_bias", True, "an attention output projection without a bias"),
    ("mlp_bias", True, "an MLP without biases"),
    ("mlp_norm", False, "a LayerNorm inside the MLP"),
    ("attention_norm", False, "a LayerNorm inside the attention"),
    ("res_post_norm", False, "residual post-norm blocks"),
    ("parallel_blocks", False, "parallel attention and MLP branches"),
    ("differential_attention", False, "differential attention"),
)


def unsupported(config):
    """Why keras-hub's ``ViTBackbone`` / ``ViTImageClassifier`` cannot compute a model of ``config`` ([] if they can).

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> unsupported(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64))
    []
    >>> unsupported(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
    ...                       layer_scale_init=1e-5, pooling="map"))  # doctest: +NORMALIZE_WHITESPACE
    ['layer_scale_init=1e-05: LayerScale', "pooling='map': ViTImageClassifier pools with the class token
     ('token') or the mean of the tokens ('gap')"]
    """
    reasons = []
    if config.stem is not None:
        reasons.append(f"stem={config.stem!r}: ViTBackbone cuts the image into patches itself (no ResNet or conv stem)")
    if config.image_size is None:
        reasons.append("image_size=None: ViTBackbone has a fixed image_shape; pass image_size=N to export at one size")
    elif config.image_size[0] != config.image_size[1]:  # vit_backbone.py: "Image height and width must be equal"
        reasons.append(f"image_size={tuple(config.image_size)}: ViTBackbone takes square images only")
    for field, paper, why in _SWITCHES:
        value = getattr(config, field)
        if value != paper:
            reasons.append(f"{field}={value!r}: {why}")
    if config.include_top and config.pooling not in ("token", "gap"):
        reasons.append(
            f"pooling={config.pooling!r}: ViTImageClassifier pools with the class token ('token') or the mean of "
            "the tokens ('gap')"
        )
    elif config.include_top and config.pooling == "gap" and config.class_token and not config.pool_include_prefix:
        reasons.append("pooling='gap' with a class token: ViTImageClassifier's 'gap' would average the class token too "
                       "(pool_include_prefix=True is its pooling)")
    elif config.include_top and config.pooling == "token" and not config.class_token:
        reasons.append("pooling='token' without a class token")
    if not config.include_top and config.pooling is not None:
        reasons.append(
            f"include_top=False with pooling={config.pooling!r}: ViTBackbone returns the token sequence; build the "
            "model with pooling=None to export its backbone"
        )
    return reasons


def _serialized(class_name, config):
    return {"module": MODULES[class_name], "class_name": class_name, "config": config,
            "registered_name": f"keras_hub>{class_name}"}


def configs(config, name="vi_t_backbone"):
    """``{file name: JSON object}`` of the preset's JSON files (what ``save_to_preset`` writes for these objects)."""
    backbone = _serialized(layout.BACKBONE, {
        "name": name, "trainable": True, "dtype": _FLOAT32,
        "image_shape": [*config.image_size, 3], "patch_size": list(config.patch_size),
        "num_layers": config.num_layers, "num_heads": config.num_heads, "hidden_dim": config.hidden_size,
        "mlp_dim": config.mlp_dim, "dropout_rate": config.dropout, "attention_dropout": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_epsilon, "use_mha_bias": True, "use_mlp_bias": True,
        "use_class_token": bool(config.class_token), "use_patch_bias": True,
    })
    out = {layout.CONFIG_FILE: backbone}
    scale, offset = layout.scale_offset(config.input_mean, config.input_std) if config.include_preprocessing else (None, None)
    converter = _serialized(layout.IMAGE_CONVERTER, {
        "name": "vi_t_image_converter", "trainable": True, "dtype": _FLOAT32, "image_size": list(config.image_size),
        "scale": scale, "offset": offset, "interpolation": "bilinear", "antialias": False,
        "crop_to_aspect_ratio": True, "pad_to_aspect_ratio": False, "bounding_box_format": "yxyx",
    })
    out[layout.IMAGE_CONVERTER_FILE] = converter
    if not config.include_top:
        return out
    preprocessor = _serialized(PREPROCESSOR, {
        "name": "vi_t_image_classifier_preprocessor", "trainable": True, "dtype": _FLOAT32,
        "image_converter": converter, "config_file": PREPROCESSOR_FILE,
    })
    out[PREPROCESSOR_FILE] = preprocessor
    out[layout.TASK_FILE] = _serialized(layout.TASK, {
        "backbone": backbone, "preprocessor": preprocessor, "name": "vi_t_image_classifier",
        "num_classes": config.num_classes, "pooling": config.pooling, "activation": config.classifier_activation,
        "dropout": 0.0, "intermediate_dim": config.representation_size,
    })
    return out


def _write_h5(path, groups, arrays):
    import h5py  # deferred: h5py (a Keras dependency), for keras-hub presets only

    with h5py.File(path, "w") as h5:
        for group, name, keys in groups:
            entry = h5.require_group(group)
            entry.attrs["name"] = name
            for i, key in enumerate(keys):
                entry.create_dataset(str(i), data=arrays[key])


def model_card(config, labels, source, parameters):
    """The preset's ``README.md``: where it came from, what it computes, how to load it."""
    task = "ViTImageClassifier" if config.include_top else "ViTBackbone"
    lines = [
        "---", "library_name: keras-hub", "tags: [keras-hub, keras, vision-transformer, keras-vit]", "---", "",
        f"# {task} exported by keras_vit", "",
        f"Exported by keras_vit {_version()} (`export_model(model, \"keras-hub\", DIR)`) from {source}, "
        f"on {datetime.date.today().isoformat()}. keras-hub was not used to write it; the files follow keras-hub's "
        "`save_to_preset` layout.", "",
        f"- ViT: image {config.image_size[0]}x{config.image_size[1]}, patch {config.patch_size[0]}x{config.patch_size[1]}, "
        f"width {config.hidden_size}, {config.num_layers} layers, {config.num_heads} heads, MLP {config.mlp_dim}, "
        f"LayerNorm epsilon {config.layer_norm_epsilon:g}; {parameters:,} parameters",
        f"- input: RGB pixels in [0, 255], scaled by the image converter to (x / 255 - {list(config.input_mean)}) / "
        f"{list(config.input_std)}" if config.include_preprocessing else "- input: already normalised images (no scaling)",
    ]
    if config.include_top:
        lines.append(f"- head: {config.num_classes} classes, pooling {config.pooling!r}, activation {config.classifier_activation!r}"
                     + (f", tanh pre-logits of {config.representation_size}" if config.representation_size else ""))
        lines.append(f"- class names: in metadata.json (`class_names`), first ones: {', '.join(labels[:5])}")
    if config.drop_path_rate:
        lines.append(f"- the model's drop_path_rate={config.drop_path_rate} (training only) has no keras-hub counterpart")
    lines += ["", "```python", "import keras_hub", f"model = keras_hub.models.{'ImageClassifier' if config.include_top else 'Backbone'}.from_preset(\"DIR\")",
              "```", "", "keras_vit reads it back with `keras_vit.from_pretrained(\"DIR\")`.", ""]
    return "\n".join(lines)


def _version():
    import keras_vit  # deferred: the package's version, read when a model card is written

    return keras_vit.__version__


def write_preset(model, folder, labels=None, source=None):
    """Write the preset of ``model`` into the new folder ``folder`` (no checks: see :func:`export`)."""
    config = config_of(model)
    arrays = {key: np.reshape(np.asarray(t.variable, np.float32), t.shape) for key, t in targets_of(model).items()}
    arrays[POSEMB_KEY] = arrays[POSEMB_KEY][0]
    os.makedirs(folder)
    for name, content in configs(config).items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(content, indent=4))
    _write_h5(os.path.join(folder, layout.MODEL_WEIGHTS_FILE),
              layout.backbone_groups(config.num_layers, class_token=bool(config.class_token)), arrays)
    if config.include_top:
        _write_h5(os.path.join(folder, layout.TASK_WEIGHTS_FILE), layout.task_groups(config.representation_size is not None), arrays)
    parameters = int(sum(np.prod(a.shape) for k, a in arrays.items() if not k.startswith(("head/", "pre_logits/"))))
    metadata = {"keras_version": _keras_version(), "keras_hub_version": None, "parameter_count": parameters,
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"), "tasks": ["ImageClassifier"],
                "exported_by": f"keras_vit {_version()}", "source": source}
    if config.include_top and labels:
        metadata["class_names"] = [str(name) for name in labels]
    with open(os.path.join(folder, layout.METADATA_FILE), "w", encoding="utf-8") as f:
        f.write(json.dumps(metadata, indent=4))
    with open(os.path.join(folder, README_FILE), "w", encoding="utf-8") as f:
        f.write(model_card(config, list(labels or []), source or model.name, parameters))


def _keras_version():
    import keras  # deferred: Keras' version for metadata.json (Keras is loaded with the model already)

    return keras.version()


def check_output(output):
    """Refuse an ``output`` that exists, before any work."""
    if os.path.exists(os.fspath(output)):
        raise FileExistsError(
            f"{os.fspath(output)!r} exists; a keras-hub preset is written into a new folder (nothing was changed)."
        )


def check_state(model):
    """Refuse a quantized or LoRA model: the preset holds float kernels (:func:`keras_vit.architecture.state.require_float`)."""
    require_float(model, "export as a keras-hub preset", "export")


def check_expressible(model):
    """Refuse a model keras-hub's ViT cannot compute, naming every reason (:func:`unsupported`), or not float."""
    check_state(model)
    reasons = unsupported(config_of(model))
    if reasons:
        raise ValueError(
            f"keras-hub's ViTBackbone / ViTImageClassifier cannot express model {model.name!r}: {'; '.join(reasons)}. "
            "Nothing was written."
        )


def random_images(shape, count, seed=0):
    """``count`` reproducible ``[0, 255]`` images of ``shape`` (H, W, C) to compare the read-back preset on."""
    return np.random.default_rng(seed).uniform(0, 255, (count, *shape)).astype("float32")


def export(model, output, *, labels=None, images, source=None, max_abs_diff=None, report=None, images_source=None):
    """Write ``model`` as a keras-hub preset at ``output`` (a new folder), checked by reading it back.

    Args:
        model: a built keras_vit model.
        output: the preset folder to create; it must not exist.
        labels: the class names (metadata.json).
        images: ``[0, 255]`` images at the model's size to compare the read-back preset on.
        source: where the model came from, for the model card.
        max_abs_diff: override the bar of :data:`keras_vit.export.verify.TOLERANCES`.
        report: optional path of the JSON report.
        images_source: where ``images`` came from, for the report (``eval_images``).

    Raises:
        ValueError: keras-hub's ViT cannot express the model (every reason named); nothing is written.
        FileExistsError: ``output`` exists.
        ExportVerificationError: the preset read back computes something else (nothing is left at ``output``).
    """
    from keras_vit.models.pretrained import from_pretrained  # deferred: the reader builds the model back (models floor)

    check_expressible(model)
    config = config_of(model)
    output = os.fspath(output)
    check_output(output)
    # what an export to the same folder that was killed left (its writer's process is gone): removed, and said
    stale = remove_stale_temporaries(output)
    for path in stale:
        print(f"keras_vit.export: removed {path!r}, the temporary folder of an export to {output!r} that did not finish")
    tmp = temporary_path(output)
    try:
        write_preset(model, tmp, labels, source)
        kwargs = {"classifier_activation": config.classifier_activation} if config.include_top else {"include_top": False, "pooling": None}
        back = from_pretrained(tmp, include_preprocessing=config.include_preprocessing, **kwargs)
        x = np.asarray(images, np.float32)
        if not config.include_preprocessing:
            x = (x / 255.0 - np.asarray(config.input_mean)) / np.asarray(config.input_std)
        expected, actual = np.asarray(model(x)), np.asarray(back(x))
        if not config.include_top:  # token sequences: compare them as rows
            expected, actual = expected.reshape(-1, expected.shape[-1]), actual.reshape(-1, actual.shape[-1])
        bars = verify.tolerance_for(FORMAT, "float32", max_abs_diff=max_abs_diff)
        result = verify.make_report(
            FORMAT, "float32", output, size_bytes=sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)),
            ops=[], expected=expected, actual=actual, tolerance=bars, runtime="keras_vit (the preset read back)",
            details={"files": sorted(os.listdir(tmp)), "input": "images float32 (batch, H, W, 3) RGB [0, 255]"},
        )
        result.eval_images = images_source or f"{len(x)} images"
        if stale:
            result.details["removed_stale"] = stale
        if report is not None:
            result.write_json(report)
        if not result.passed:
            raise ExportVerificationError(result)
        os.rename(tmp, output)
    except (OSError, ValueError) as error:
        if isinstance(error, (ExportVerificationError, FileExistsError)):
            raise
        raise ExportError(f"Writing the keras-hub preset {output!r} failed: {error}") from error
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    return result
