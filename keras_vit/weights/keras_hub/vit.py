"""keras-hub's ``ViTBackbone`` and ``ViTImageClassifier`` presets: what their ``config.json``, ``task.json`` and
``metadata.json`` (the class names a keras_vit export wrote) declare, and where each weight lies in their
``.weights.h5`` files (the groups of :mod:`keras_vit.weights.keras_hub.preset`). What keras_vit cannot compute the
same way (keras-hub's ``"gap"`` pooling over the class token too, ``"token"`` pooling without one, channels-first
inputs) is refused by name; the biases keras-hub's switches leave out are zeros (the same computation).
"""

import os

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.declared import declare
from keras_vit.weights.keras_hub import preset as preset_files
from keras_vit.weights.keras_hub.family import Keys, Reader, Recorded, refuse_unread
from keras_vit.weights.source import Reading

# {ViTConfig field: (config field, ViTBackbone's default: None where the config must name it)}
_FIELDS = {"num_heads": ("num_heads", None), "num_layers": ("num_layers", None), "hidden_size": ("hidden_dim", None),
           "mlp_dim": ("mlp_dim", None), "layer_norm_epsilon": ("layer_norm_epsilon", 1e-6),
           "class_token": ("use_class_token", True), "qkv_bias": ("use_mha_bias", True)}
_FLAGS = ("use_class_token", "use_mha_bias", "use_mlp_bias", "use_patch_bias")


def reading(preset, config, path):
    """The :class:`~keras_vit.weights.source.Reading` of a ``ViTBackbone`` preset (``config``: its ``config.json``'s)."""
    read = Reader(config, path, "config.")
    shape = list(read.shape("image_shape"))
    record = {}
    for field, (name, default) in _FIELDS.items():  # said as the value read, the field present or not
        value = read.field(field, name, default)[0]
        declare(record, field, value, f"config.{name}={value!r}", path)
    flags = {name: read.flag(name, True) for name in _FLAGS}
    declare(record, "mlp_activation", "gelu", "ViTBackbone's MLP (keras.activations.gelu, exact)", path)
    patch = config_lib.size_pair(read.config.get("patch_size"), path, "patch_size")
    expected = [(field, record[field].said, record[field].value) for field in ("num_layers", "hidden_size", "mlp_dim")]
    expected += [
        ("patch_size", f"config.patch_size={read.config.get('patch_size')!r}", patch),
        ("image_size", f"config.image_shape={shape!r}", (shape[0], shape[1])),
        ("num_channels", f"config.image_shape={shape!r}", shape[2] if len(shape) == 3 else 3),
        ("class_token", record["class_token"].said, record["class_token"].value),
    ]
    read.refuse_unread(preset_files.BACKBONE)
    found = Reading(declared=record, expected=expected, architecture=preset_files.BACKBONE)
    for flag, what in (("use_mha_bias", "the attention's output bias"), ("use_mlp_bias", "the MLP's biases"),
                       ("use_patch_bias", "the patch embedding's bias")):
        if not flags[flag]:
            found.notes.append(f"config.{flag}=false: zeros stand in for {what} (the same computation)")
    pre_logits = _task(preset, found, flags["use_class_token"]) if os.path.isfile(preset.file(preset_files.TASK_FILE)) else None
    found.layout = _keys(flags, record, pre_logits)._replace(label=("ViT", "config.json / task.json"))
    preset.normalization(found, preset_files.IMAGE_CONVERTER)
    found.class_names = preset.class_names()
    return found


def _task(preset, found, class_token):
    """``task.json``'s head, checked: its pooling, classes and activation put on ``found``; whether it has a
    pre-logits layer (``intermediate_dim``)."""
    config, path = preset.object(preset_files.TASK_FILE, preset_files.TASK)
    config = Recorded(config)  # its fields are all read, or refused (the backbone's are config.json's)
    pooling = config.get("pooling", "token")
    if pooling == "gap" and class_token:  # ViTImageClassifier averages every token, the class token too
        declare(found.declared, "pool_include_prefix", True, "config.pooling='gap' with use_class_token=true", path)
    if pooling == "token" and not class_token:
        raise CheckpointError(
            f"{path!r}: config.pooling='token' with use_class_token=false classifies the first patch token; "
            "keras_vit has no such pooling."
        )
    if pooling not in ("token", "gap"):
        raise CheckpointError(f"{path!r}: config.pooling={pooling!r}; ViTImageClassifier pools with 'token' or 'gap'.")
    declare(found.declared, "pooling", pooling, f"config.pooling={pooling!r}", path)
    intermediate = config.get("intermediate_dim")
    if intermediate is not None:
        intermediate = config_lib.number(config, "intermediate_dim", None, path, integer=True)
    classes = config_lib.number(config, "num_classes", None, path, integer=True)
    activation = config.get("activation")
    if activation is not None and not isinstance(activation, str):
        raise CheckpointError(f"{path!r}: config.activation={activation!r}, expected null or an activation's name.")
    refuse_unread(path, preset_files.TASK, [("config.", config, ("backbone", "preprocessor"))])
    found.expected.append(("num_classes", f"task.json config.num_classes={classes!r}", classes))
    found.architecture = preset_files.TASK
    found.classifier_activation = (None if activation in (None, "linear") else activation, f"task.json config.activation={activation!r}")
    return intermediate is not None


def _keys(flags, record, pre_logits):
    """Where a ``ViTBackbone``'s weights lie (:func:`~keras_vit.weights.keras_hub.preset.backbone_groups`), the
    biases its switches leave out as zeros, and (``pre_logits`` None: no task) its task's head, the ``Dense`` groups
    found by the name Keras stored."""
    depth, width, mlp = (record[field].value for field in ("num_layers", "hidden_size", "mlp_dim"))
    groups = preset_files.backbone_groups(depth, class_token=flags["use_class_token"], mha_bias=flags["use_mha_bias"],
                                          mlp_bias=flags["use_mlp_bias"], patch_bias=flags["use_patch_bias"])
    every = preset_files.backbone_groups(depth, class_token=flags["use_class_token"])  # with every bias
    have = {key for _, _, keys in groups for key in keys}
    zeros = {key: (mlp,) if key.endswith("Dense_0/bias") else (width,) for _, _, keys in every for key in keys
             if key not in have and not key.endswith(("query/bias", "key/bias", "value/bias"))}  # qkv_bias=False: none
    task = None
    if pre_logits is not None:
        head = preset_files.task_groups(pre_logits)
        task = Keys({f"{group}/{i}": key for group, _, keys in head for i, key in enumerate(keys)},
                    named={group: (name, None) for group, name, keys in head if name in ("predictions", "pre_logits")})
    return Keys({f"{group}/{i}": key for group, _, keys in groups for i, key in enumerate(keys)}, zeros=zeros, task=task)
