"""keras-hub presets of ViT (``ViTBackbone``, ``ViTImageClassifier``) and of the family (``DINOV2Backbone``, ``DeiTBackbone``,
the image towers of ``SigLIPBackbone`` and ``CLIPBackbone``: :mod:`~keras_vit.weights.keras_hub_family`) -> the original
checkpoint layout, keras-hub not imported.

A preset folder (:mod:`~keras_vit.weights.keras_hub_layout` has the files and the variable paths) is read
with ``h5py`` and ``json``: ``config.json`` declares the backbone (heads, layers, width, MLP, epsilon,
``use_class_token``, biases, patch size, image shape), ``task.json`` the classifier (``pooling``,
``intermediate_dim``, ``num_classes``), ``image_converter.json`` the input scaling (``scale`` and
``offset``, which become the model's ``input_mean`` / ``input_std``: ``std = 1 / (255 scale)``,
``mean = -offset / (255 scale)``, so [0, 255] pixels give keras-hub's logits), and ``metadata.json`` the
class names a keras_vit export wrote there. Everything declared is compared with the model
(:mod:`keras_vit.weights.declared`) or with the weights' shapes; what keras_vit cannot compute the same
way (keras-hub's ``"gap"`` pooling over the class token too, ``"token"`` pooling without one, channels-first
inputs) is refused by name; ``DeiTImageClassifier``'s head (the class token only) is left out, named in the report.
"""

import json
import os
import re

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import keras_hub_family as family
from keras_vit.weights import keras_hub_layout as layout
from keras_vit.weights.declared import declare
from keras_vit.weights.mapping import POSEMB_KEY

FORMAT = "keras-hub"
LAYER_NORM_EPSILON = 1e-6  # ViTBackbone's default layer_norm_epsilon


def is_preset(folder):
    """Whether ``folder`` holds a keras-hub preset: a ``config.json`` of a serialised keras-hub object.

    Example:
    >>> import os, tempfile, json
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"class_name": "ViTBackbone", "registered_name": "keras_hub>ViTBackbone", "config": {}}, f)
    >>> is_preset(folder), is_preset(tempfile.mkdtemp())
    (True, False)
    """
    path = os.path.join(os.fspath(folder), layout.CONFIG_FILE)
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and str(config.get("registered_name") or "").startswith("keras_hub>")


def _object(folder, name, expected):
    """The ``config`` of the serialised keras-hub object in ``folder/name``, checked to be one of ``expected``."""
    path = os.path.join(folder, name)
    content = config_lib.read_json(path)
    found = content.get("class_name")
    expected = (expected,) if isinstance(expected, str) else tuple(expected)
    if found not in expected:
        raise CheckpointError(
            f"{path!r} is a keras-hub {found!r} where keras_vit reads a {' or '.join(expected)}. keras_vit reads keras-hub's "
            f"ViT presets ({layout.BACKBONE}, {layout.TASK}), {', '.join(family.BACKBONES)} (the image towers of "
            "SigLIP and CLIP). keras-hub's other presets are not read: load those models' Hugging Face "
            "repositories (hf://...) instead."
        )
    return config_lib.json_object(content.get("config"), path, "config"), path


def _flag(config, field, default, path):
    value = config.get(field, default)
    if not isinstance(value, bool):
        raise CheckpointError(f"{path!r}: config.{field}={value!r}, expected true or false.")
    return value


def _per_channel(value, field, path, default):
    """An ``ImageConverter`` scale or offset (None, a number or one per channel) as 3 floats."""
    if value is None:
        return [float(default)] * 3
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if (not isinstance(value, list) or len(value) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value)):
        raise CheckpointError(f"{path!r}: config.{field}={value!r}, expected null, a number or 3 numbers (RGB).")
    return [float(v) for v in value]


def _normalization(folder, settings, converter=layout.IMAGE_CONVERTER, default=None):
    """The image converter's scale and offset as the model's input mean and std (without a converter: ``default``,
    ``(label, (mean, std))`` of the published presets, or None)."""
    path = os.path.join(folder, layout.IMAGE_CONVERTER_FILE)
    if not os.path.isfile(path) and default is not None:
        label, (settings["mean"], settings["std"]) = default[0], map(list, default[1])
        settings["notes"].append(f"no {layout.IMAGE_CONVERTER_FILE}: the input scaling of keras-hub's published presets "
                                 f"of {settings['architecture']} ({label} mean and std)")
        return
    if not os.path.isfile(path):
        settings["notes"].append(
            f"no {layout.IMAGE_CONVERTER_FILE}: the input scaling is keras_vit's [-1, 1] (keras-hub's backbone takes "
            "whatever its preprocessing gives it)"
        )
        return
    config, _ = _object(folder, layout.IMAGE_CONVERTER_FILE, converter)
    scale = _per_channel(config.get("scale"), "scale", path, 1.0)
    offset = _per_channel(config.get("offset"), "offset", path, 0.0)
    if min(scale) <= 0:
        raise CheckpointError(f"{path!r}: config.scale={config.get('scale')!r}, expected positive numbers.")
    if "mean" in config or "variance" in config:
        scale, offset = _old_mean_variance(config, scale, path)
    settings["mean"], settings["std"] = layout.mean_std(scale, offset)
    settings["notes"].append(
        f"input scaling from {layout.IMAGE_CONVERTER_FILE}: scale={scale}, offset={offset} -> "
        f"input_mean={[round(v, 6) for v in settings['mean']]}, input_std={[round(v, 6) for v in settings['std']]}"
    )


def _old_mean_variance(config, scale, path):
    """``(scale, offset)`` of a converter saved with keras-hub's old argument names, as ``ImageConverter.__init__``
    computes them: ``std = sqrt(variance)``, ``scale / std``, ``offset = -mean / std`` (the file's offset unused)."""
    raw = config.get("scale")
    if not ("mean" in config and "variance" in config) or isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise CheckpointError(
            f"{path!r}: config has {'mean' if 'mean' in config else 'variance'}={config.get('mean', config.get('variance'))!r}; "
            "keras-hub's ImageConverter reads its old arguments mean and variance together, with a single number "
            "as scale, and fails otherwise.")
    mean = _per_channel(config["mean"], "mean", path, 0.0)
    variance = _per_channel(config["variance"], "variance", path, 1.0)
    if min(variance) <= 0:
        raise CheckpointError(f"{path!r}: config.variance={config['variance']!r}, expected positive numbers.")
    std = [float(np.sqrt(v)) for v in variance]
    return [s / d for s, d in zip(scale, std)], [-m / d for m, d in zip(mean, std)]


def settings(folder):
    """What a preset's JSON files say: the declared record, the sizes to check against the weights, the head,
    the input scaling and the class names (see the module docstring)."""
    folder = os.fspath(folder)
    config, path = _object(folder, layout.CONFIG_FILE, (layout.BACKBONE,) + family.BACKBONES)
    name = config_lib.read_json(path).get("class_name")
    if name in family.BACKBONES:
        found = family.settings(name, config, path)
        _normalization(folder, found, family.IMAGE_CONVERTERS[name], family.DEFAULT_NORMALIZATION[name])
        task_path = os.path.join(folder, layout.TASK_FILE)
        if name in family.TASKS and os.path.isfile(task_path):
            task, task_path = _object(folder, layout.TASK_FILE, family.TASKS[name])
            found["task_skipped"] = family.task_reason(name, task, task_path)
        elif os.path.isfile(task_path):  # a task keras_vit has no reader for: said, never dropped silently
            task_class = config_lib.read_json(task_path).get("class_name")
            found["task_skipped"] = (f"task.json's {task_class!r} is no task keras_vit reads for a {name}: the backbone is "
                                     "loaded (include_top=False), its task's head is not")
        return found
    data_format = config.get("data_format", "channels_last")
    if data_format not in (None, "channels_last"):
        raise CheckpointError(f"{path!r}: config.data_format={data_format!r}; keras_vit models take channels_last images.")
    shape = config.get("image_shape")
    if not isinstance(shape, list) or len(shape) != 3 or not all(isinstance(v, int) and v > 0 for v in shape):
        raise CheckpointError(f"{path!r}: config.image_shape={shape!r}, expected [height, width, channels].")
    record, expected = {}, []
    for field, name, default, integer in (
        ("num_heads", "num_heads", None, True), ("num_layers", "num_layers", None, True),
        ("hidden_size", "hidden_dim", None, True), ("mlp_dim", "mlp_dim", None, True),
        ("layer_norm_epsilon", "layer_norm_epsilon", LAYER_NORM_EPSILON, False),
    ):
        value = config_lib.number(config, name, default, path, integer=integer)
        if value is None:
            raise CheckpointError(f"{path!r}: config.{name} is missing; a ViTBackbone config names it.")
        declare(record, field, value, f"config.{name}={value!r}", path)
        if field in ("num_layers", "hidden_size", "mlp_dim"):
            expected.append((field, f"config.{name}={value!r}", value))
    flags = {name: _flag(config, name, True, path) for name in ("use_class_token", "use_mha_bias", "use_mlp_bias", "use_patch_bias")}
    declare(record, "class_token", flags["use_class_token"], f"config.use_class_token={flags['use_class_token']!r}", path)
    declare(record, "qkv_bias", flags["use_mha_bias"], f"config.use_mha_bias={flags['use_mha_bias']!r}", path)
    declare(record, "mlp_activation", "gelu", "ViTBackbone's MLP (keras.activations.gelu, exact)", path)
    patch = config_lib.size_pair(config.get("patch_size"), path, "patch_size")
    expected += [
        ("patch_size", f"config.patch_size={config.get('patch_size')!r}", patch),
        ("image_size", f"config.image_shape={shape!r}", (shape[0], shape[1])),
        ("num_channels", f"config.image_shape={shape!r}", shape[2]),
        ("class_token", f"config.use_class_token={flags['use_class_token']!r}", flags["use_class_token"]),
    ]
    found = {"declared": record, "expected": expected, "flags": flags, "num_layers": record["num_layers"].value,
             "num_heads": record["num_heads"].value, "notes": [], "task": None, "class_names": None,
             "architecture": layout.BACKBONE, "mean": None, "std": None}
    for flag, what in (("use_mha_bias", "the attention's output bias"), ("use_mlp_bias", "the MLP's biases"),
                       ("use_patch_bias", "the patch embedding's bias")):
        if not flags[flag]:
            found["notes"].append(f"config.{flag}=false: zeros stand in for {what} (the same computation)")
    if os.path.isfile(os.path.join(folder, layout.TASK_FILE)):
        found["task"] = _task(folder, flags["use_class_token"], record)
        found["architecture"] = layout.TASK
    _normalization(folder, found)
    found["class_names"] = _class_names(folder)
    return found


def _task(folder, class_token, record):
    """``task.json``'s head: pooling, pre-logits width, classes, activation, all checked."""
    config, path = _object(folder, layout.TASK_FILE, layout.TASK)
    pooling = config.get("pooling", "token")
    if pooling == "gap" and class_token:
        raise CheckpointError(
            f"{path!r}: config.pooling='gap' with use_class_token=true averages the class token with the patch "
            "tokens; keras_vit's 'gap' averages the patch tokens only, so the logits would differ. keras_vit "
            "cannot build this classifier (its backbone loads: a backbone-only preset has no task.json)."
        )
    if pooling == "token" and not class_token:
        raise CheckpointError(
            f"{path!r}: config.pooling='token' with use_class_token=false classifies the first patch token; "
            "keras_vit has no such pooling."
        )
    if pooling not in ("token", "gap"):
        raise CheckpointError(f"{path!r}: config.pooling={pooling!r}; ViTImageClassifier pools with 'token' or 'gap'.")
    declare(record, "pooling", pooling, f"config.pooling={pooling!r}", path)
    intermediate = config.get("intermediate_dim")
    if intermediate is not None:
        intermediate = config_lib.number(config, "intermediate_dim", None, path, integer=True)
    classes = config_lib.number(config, "num_classes", None, path, integer=True)
    activation = config.get("activation")
    if activation is not None and not isinstance(activation, str):
        raise CheckpointError(f"{path!r}: config.activation={activation!r}, expected null or an activation's name.")
    return {"pooling": pooling, "intermediate_dim": intermediate, "num_classes": classes, "activation": activation, "path": path}


def _class_names(folder):
    path = os.path.join(folder, layout.METADATA_FILE)
    if not os.path.isfile(path):
        return None
    names = config_lib.read_json(path).get("class_names")
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{path!r}: class_names={names!r}, expected a list of strings.")
    return names


# ------------------------------------------------------------------ the weights


def _weight_files(folder):
    """The backbone's ``.weights.h5`` files: ``model.weights.h5``, or the shards ``model.weights.json`` names."""
    single = os.path.join(folder, layout.MODEL_WEIGHTS_FILE)
    if os.path.isfile(single):
        return [single]
    index = os.path.join(folder, layout.SHARDED_WEIGHTS_FILE)
    if not os.path.isfile(index):
        raise CheckpointError(
            f"keras-hub preset {folder!r} has neither {layout.MODEL_WEIGHTS_FILE} nor {layout.SHARDED_WEIGHTS_FILE} "
            "(sharded weights): the download is incomplete."
        )
    weight_map = config_lib.json_object(config_lib.read_json(index).get("weight_map"), index, "weight_map")
    files = set()
    for group, shards in weight_map.items():
        for shard in shards if isinstance(shards, list) else [shards]:
            if not isinstance(shard, str) or os.path.basename(shard) != shard or not shard.endswith(".weights.h5"):
                raise CheckpointError(
                    f"{index!r}: weight_map[{group!r}]={shards!r}, expected the names of .weights.h5 files beside it."
                )
            files.add(os.path.join(folder, shard))
    missing = sorted(os.path.basename(f) for f in files if not os.path.isfile(f))
    if missing or not files:
        raise CheckpointError(f"{index!r} names shard(s) that are not in the folder: {', '.join(missing) or 'none'}.")
    return sorted(files)


def _datasets(files):
    """``{dataset path: (file, path)}`` of every array in ``files`` (the optimizer's state left out)."""
    # deferred: h5py (a Keras dependency), for keras-hub presets only
    import h5py

    found = {}
    for file in files:
        try:
            with h5py.File(file, "r") as h5:
                names = []
                h5.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        except OSError as error:
            raise CheckpointError(f"Cannot read {file!r} as HDF5 (.weights.h5): {error}") from error
        for name in names:
            if name.startswith("optimizer/"):
                continue
            if name in found:
                raise CheckpointError(f"{name!r} is in two shards, {found[name][0]!r} and {file!r}.")
            found[name] = (file, name)
    return found


def _group_names(file):
    """``{group path: the name attribute Keras wrote}`` of a ``.weights.h5``."""
    import h5py  # deferred: h5py, for keras-hub presets only

    names = {}
    with h5py.File(file, "r") as h5:
        h5.visititems(lambda name, obj: names.__setitem__(name, obj.attrs.get("name")) if isinstance(obj, h5py.Group) else None)
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in names.items()}


def _task_groups(file, pre_logits):
    """The task's groups, the head found by the name Keras stored (``predictions``, ``pre_logits``) where it did."""
    groups = layout.task_groups(pre_logits)
    names = {name: group for group, name in _group_names(file).items() if name in ("predictions", "pre_logits")}
    return [(names.get(name, group), name, keys) for group, name, keys in groups]


def _plan(folder, found):
    """``{canonical key: (file, dataset path)}`` of every tensor, checked complete and with nothing left over."""
    flags = found["flags"]
    groups = [(files, g) for files in [_weight_files(folder)] for g in layout.backbone_groups(
        found["num_layers"], class_token=flags["use_class_token"], mha_bias=flags["use_mha_bias"],
        mlp_bias=flags["use_mlp_bias"], patch_bias=flags["use_patch_bias"])]
    task = found["task"]
    task_file = os.path.join(folder, layout.TASK_WEIGHTS_FILE)
    if task is not None:
        if not os.path.isfile(task_file):
            raise CheckpointError(f"keras-hub preset {folder!r} has {layout.TASK_FILE} but no {layout.TASK_WEIGHTS_FILE}.")
        groups += [([task_file], g) for g in _task_groups(task_file, task["intermediate_dim"] is not None)]
    plan, available = {}, {}
    for files, _ in groups:
        for file in files:
            if file not in available:
                available[file] = _datasets([file])
    pool = {}
    for file, datasets in available.items():
        for name in datasets:
            pool.setdefault((file == task_file, name), file)
    for files, (group, _, keys) in groups:
        is_task = files == [task_file]
        for i, key in enumerate(keys):
            name = f"{group}/{i}"
            file = pool.pop((is_task, name), None)
            if file is None:
                where = os.path.basename(files[0]) if len(files) == 1 else "the shards of " + layout.SHARDED_WEIGHTS_FILE
                raise CheckpointError(
                    f"keras-hub preset {folder!r}: {where} has no {name!r} ({key} in the original layout); "
                    "the file does not match its config.json / task.json."
                )
            plan[key] = (file, name)
    extra = sorted(name for _, name in pool)
    if extra:
        raise CheckpointError(
            f"keras-hub preset {folder!r} has {len(extra)} weight(s) a ViT of its config.json does not have: "
            f"{', '.join(extra[:8])}"
        )
    return plan


def _zeros(found, shapes_or_arrays, make):
    """The biases keras-hub's switches leave out (use_mha_bias' output bias, use_mlp_bias, use_patch_bias), as zeros."""
    flags, out = found["flags"], {}
    width = found["declared"]["hidden_size"].value
    mlp = found["declared"]["mlp_dim"].value
    if not flags["use_patch_bias"]:
        out["embedding/bias"] = make((width,))
    for i in range(found["num_layers"]):
        key = f"Transformer/encoderblock_{i}"
        if not flags["use_mha_bias"]:
            out[f"{key}/MultiHeadDotProductAttention_1/out/bias"] = make((width,))
        if not flags["use_mlp_bias"]:
            out[f"{key}/MlpBlock_3/Dense_0/bias"] = make((mlp,))
            out[f"{key}/MlpBlock_3/Dense_1/bias"] = make((width,))
    return {**shapes_or_arrays, **out}


def _family_plan(folder, found):
    """:func:`_plan` of a family backbone (:mod:`~keras_vit.weights.keras_hub_family`): ``found["skipped"]`` gets
    ``{what: reason}`` of the weights left out on purpose (a text tower, a buffer)."""
    files = _weight_files(folder)
    datasets = _datasets(files)
    names = {}
    for file in files:
        names.update(_group_names(file))
    table, skip = family.resolve(found, names)
    plan, extra, skipped = {}, [], {}
    for name, (file, _) in datasets.items():
        pattern = next((p for p in skip if re.search(p, name)), None)
        if pattern is not None:
            label = pattern.strip("^$") + ("" if pattern.endswith("$") else "*")
            skipped[label] = (skipped.get(label, (0,))[0] + 1, skip[pattern])
        elif name in table:
            plan[table[name]] = (file, name)
        else:
            extra.append(name)
    missing = [name for name in table if name not in datasets]
    if missing:
        where = os.path.basename(files[0]) if len(files) == 1 else "the shards of " + layout.SHARDED_WEIGHTS_FILE
        raise CheckpointError(
            f"keras-hub preset {folder!r}: {where} has no {missing[0]!r} ({table[missing[0]]} in the original layout)"
            f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}; the file does not match its config.json."
        )
    if extra:
        raise CheckpointError(
            f"keras-hub preset {folder!r} has {len(extra)} weight(s) a {found['architecture']} of its config.json does not "
            f"have: {', '.join(sorted(extra)[:8])}"
        )
    found["skipped"] = {f"{label} ({n} tensor{'s' if n > 1 else ''})": why for label, (n, why) in skipped.items()}
    if found.get("task_skipped"):  # a task's head keras_vit cannot compute: named in the report, not loaded
        task_file = os.path.join(folder, layout.TASK_WEIGHTS_FILE)
        n = len(_datasets([task_file])) if os.path.isfile(task_file) else 0
        found["skipped"][f"head ({layout.TASK_WEIGHTS_FILE}, {n} tensor{'s' if n != 1 else ''})"] = found["task_skipped"]
    return plan


def shapes(folder, found):
    """``{original key: shape}`` of a preset, its data not read."""
    import h5py  # deferred: h5py, for keras-hub presets only

    if found.get("family"):
        out, plan = {}, _family_plan(folder, found)
        for key, (file, name) in plan.items():
            with h5py.File(file, "r") as h5:
                out[key] = family.shape(found, key, tuple(h5[name].shape))
        if out.pop(family.POSITION_IDS, None) is not None:  # a few integers, read now for the note
            with h5py.File(plan[family.POSITION_IDS][0], "r") as h5:
                family.position_ids(folder, found, h5[plan[family.POSITION_IDS][1]][()], out[POSEMB_KEY][1])
        return {**out, **{key: shape for key, shape in found["zeros"].items()}}
    out = {}
    for key, (file, name) in _plan(folder, found).items():
        with h5py.File(file, "r") as h5:
            out[key] = tuple(h5[name].shape)
    if POSEMB_KEY in out:
        out[POSEMB_KEY] = (1,) + out[POSEMB_KEY]
    return _zeros(found, out, tuple)


def arrays(folder, found):
    """``{original key: np.ndarray}`` of a preset; every array read now (a damaged file fails here, named)."""
    import h5py  # deferred: h5py, for keras-hub presets only

    family_weights = bool(found.get("family"))
    out = {}
    for key, (file, name) in (_family_plan if family_weights else _plan)(folder, found).items():
        try:
            with h5py.File(file, "r") as h5:
                out[key] = np.asarray(h5[name][()])
        except (OSError, KeyError) as error:
            raise CheckpointError(f"Cannot read {name!r} from {file!r}: {error}") from error
    if family_weights:
        ids = out.pop(family.POSITION_IDS, None)
        if ids is not None:  # an Embedding read at its stored indices (keras-hub's CLIP and SigLIP)
            out[POSEMB_KEY] = out[POSEMB_KEY][family.position_ids(folder, found, ids, out[POSEMB_KEY].shape[0])]
        out = {key: family.array(found, key, array) for key, array in out.items()}
        return {**out, **{key: np.zeros(shape, np.float32) for key, shape in found["zeros"].items()}}
    if POSEMB_KEY in out:
        out[POSEMB_KEY] = out[POSEMB_KEY][None]
    return _zeros(found, out, lambda shape: np.zeros(shape, np.float32))
