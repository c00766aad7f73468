"""keras-hub presets on disk, read with ``json`` and ``h5py`` (keras-hub not imported): a preset folder's files
(:class:`Preset`), and where each weight of a ViT preset lies in its ``.weights.h5`` files.

A keras-hub preset (``keras_hub/src/utils/preset_utils.py``) is a folder: ``config.json`` (the backbone,
``keras.saving.serialize_keras_object``), ``model.weights.h5`` (``backbone.save_weights``; or
``model.weights.json`` with shards ``model_00000.weights.h5``...), ``metadata.json``, and for a task
``task.json``, ``task.weights.h5`` (the task's weights that are not the backbone's), ``preprocessor.json``
and ``image_converter.json``.

The variable paths are those Keras 3 writes (``keras/src/saving/saving_lib.py``: ``_save_state`` walks a
functional model's ``layers`` first, then every attribute in sorted order, private ones last, and names a
layer inside a list by its class name in snake case, ``_get_unique_name`` adding ``_1``, ``_2``...; a layer's
own variables go to ``<path>/vars/<i>`` in creation order, ``H5IOStore``, with the layer's name as the attribute
``name``). keras-hub's ``ViTBackbone`` (``keras_hub/src/models/vit/vit_backbone.py``, ``vit_layers.py``) is a
functional model of ``InputLayer``, ``ViTPatchingAndEmbedding`` and ``ViTEncoder`` (:func:`backbone_groups`);
``ViTImageClassifier`` (``vit_image_classifier.py``) a functional model whose ``save_task_weights`` skips the
backbone's layers (:func:`task_groups`). Its tensors are the original checkpoint's in the original layouts (Flax's
``(in, out)`` kernels, the attention's heads apart), so the mapping is a renaming.
"""

import os

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.input_normalization import channels
from keras_vit.weights.mapping import ATT as _ATT, POSEMB_KEY

CONFIG_FILE = "config.json"
MODEL_WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
TASK_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
IMAGE_CONVERTER_FILE = "image_converter.json"
METADATA_FILE = "metadata.json"

BACKBONE = "ViTBackbone"
TASK = "ViTImageClassifier"
IMAGE_CONVERTER = "ViTImageConverter"

_EMBED = "layers/vi_t_patching_and_embedding"
_ENCODER = "layers/vi_t_encoder"


def block(prefix, i):
    """Keras names the i-th layer of a list by its class in snake case, ``_1``, ``_2``... after the first."""
    return prefix + (f"_{i}" if i else "")


def backbone_groups(num_layers, *, class_token=True, mha_bias=True, mlp_bias=True, patch_bias=True):
    """``[(group, layer name, [canonical key, ...]), ...]``: every ``vars`` group of a ``ViTBackbone``'s
    ``model.weights.h5`` (those without variables too, as Keras writes them), the name Keras stores with it, and the
    original checkpoint keys of its variables in order (``MultiHeadAttention``'s ``EinsumDense`` kernels
    ``(D, heads, head_dim)``, ``(heads, head_dim, D)``; the position ``Embedding`` ``(tokens, D)``).

    Example:
    >>> groups = backbone_groups(1)
    >>> [g for g in groups if g[0].endswith("query_dense/vars")]  # doctest: +NORMALIZE_WHITESPACE
    [('layers/vi_t_encoder/encoder_layers/vi_t_encoder_block/mha/query_dense/vars', 'query',
      ['Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel',
       'Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/bias'])]
    """
    groups = [
        ("vars", "vi_t_backbone", []),
        ("layers/input_layer/vars", "images", []),
        (f"{_EMBED}/vars", "vit_patching_and_embedding", ["cls"] if class_token else []),
        (f"{_EMBED}/patch_embedding/vars", "patch_embedding", ["embedding/kernel"] + (["embedding/bias"] if patch_bias else [])),
        (f"{_EMBED}/position_embedding/vars", "position_embedding", [POSEMB_KEY]),
        (f"{_ENCODER}/vars", "vit_encoder", []),
        (f"{_ENCODER}/dropout/vars", "dropout", []),
    ]
    for i in range(num_layers):
        layer, key = block(f"{_ENCODER}/encoder_layers/vi_t_encoder_block", i), f"Transformer/encoderblock_{i}"
        groups += [
            (f"{layer}/vars", f"transformer_block_{i + 1}", []),
            (f"{layer}/dropout/vars", "dropout", []),
            (f"{layer}/layer_norm_1/vars", "ln_1", [f"{key}/LayerNorm_0/scale", f"{key}/LayerNorm_0/bias"]),
            (f"{layer}/layer_norm_2/vars", "ln_2", [f"{key}/LayerNorm_2/scale", f"{key}/LayerNorm_2/bias"]),
            (f"{layer}/mha/vars", "mha", []),
            (f"{layer}/mha/_dropout_layer/vars", "dropout", []),
            (f"{layer}/mha/_softmax/vars", "softmax", []),
        ]
        for dense, name, part in (("query_dense", "query", "query"), ("key_dense", "key", "key"),
                                  ("value_dense", "value", "value"), ("output_dense", "attention_output", "out")):
            keys = [f"{key}/{_ATT}/{part}/kernel"] + ([f"{key}/{_ATT}/{part}/bias"] if mha_bias else [])
            groups.append((f"{layer}/mha/{dense}/vars", name, keys))
        groups += [
            (f"{layer}/mlp/vars", "mlp", []),
            (f"{layer}/mlp/dense_1/vars", "dense_1",
             [f"{key}/MlpBlock_3/Dense_0/kernel"] + ([f"{key}/MlpBlock_3/Dense_0/bias"] if mlp_bias else [])),
            (f"{layer}/mlp/dense_2/vars", "dense_2",
             [f"{key}/MlpBlock_3/Dense_1/kernel"] + ([f"{key}/MlpBlock_3/Dense_1/bias"] if mlp_bias else [])),
            (f"{layer}/mlp/dropout/vars", "dropout", []),
        ]
    groups.append((f"{_ENCODER}/layer_norm/vars", "ln", ["Transformer/encoder_norm/scale", "Transformer/encoder_norm/bias"]))
    return groups


def task_groups(pre_logits):
    """The groups of a ``ViTImageClassifier``'s ``task.weights.h5``: its ``Dense`` layers by class name in graph
    order, ``layers/dense`` (the tanh pre-logits, with ``intermediate_dim``) and ``layers/dense_1``, else
    ``layers/dense``, the ``predictions`` head.

    Example:
    >>> [(g, n) for g, n, keys in task_groups(True) if keys]
    [('layers/dense/vars', 'pre_logits'), ('layers/dense_1/vars', 'predictions')]
    """
    pre = [("layers/dense/vars", "pre_logits", ["pre_logits/kernel", "pre_logits/bias"])] if pre_logits else []
    return [
        ("vars", "vi_t_image_classifier", []), *pre,
        (f"layers/dense{'_1' if pre_logits else ''}/vars", "predictions", ["head/kernel", "head/bias"]),
        ("layers/dropout/vars", "output_dropout", []),
        ("preprocessor/vars", "vi_t_image_classifier_preprocessor", []),
        ("preprocessor/image_converter/vars", "vi_t_image_converter", []),
        ("preprocessor/image_converter/resizing/vars", "resizing", []),
    ]


def scale_offset(mean, std):
    """keras-hub's ``ImageConverter`` ``scale`` and ``offset`` per channel for inputs ``(x / 255 - mean) / std``.

    ``x * scale + offset == (x / 255 - mean) / std``: ``scale = 1 / (255 std)``, ``offset = -mean / std``
    (keras-hub's own ``convert_vit_checkpoints.py``: ``scale = rescale_factor / std``, ``offset = -mean / std``).

    Example:
    >>> scale_offset([0.5] * 3, [0.5] * 3)
    ([0.00784313725490196, 0.00784313725490196, 0.00784313725490196], [-1.0, -1.0, -1.0])
    """
    return [1.0 / (255.0 * s) for s in std], [-m / s for m, s in zip(mean, std)]


def mean_std(scale, offset):
    """The inverse of :func:`scale_offset`: ``std = 1 / (255 scale)``, ``mean = -offset / (255 scale)``.

    Example:
    >>> mean, std = mean_std(*scale_offset([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
    >>> [round(v, 6) for v in mean + std]
    [0.485, 0.456, 0.406, 0.229, 0.224, 0.225]
    """
    return [-o / (255.0 * s) for s, o in zip(scale, offset)], [1.0 / (255.0 * s) for s in scale]


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
    try:
        config = config_lib.read_json(os.path.join(os.fspath(folder), CONFIG_FILE))
    except CheckpointError:  # none, or no JSON object
        return False
    return str(config.get("registered_name") or "").startswith("keras_hub>")


def _per_channel(config, field, path, default, positive=False):
    """An ``ImageConverter`` scale, offset, mean or variance (absent: ``default``; a number or one per channel) as 3 floats."""
    value = config.get(field)
    return [float(default)] * 3 if value is None else channels(value, path, f"config.{field}", positive)


def _old_mean_variance(config, scale, path):
    """``(scale, offset)`` of a converter saved with keras-hub's old argument names, as ``ImageConverter.__init__``
    computes them: ``std = sqrt(variance)``, ``scale / std``, ``offset = -mean / std`` (the file's offset unused)."""
    raw = config.get("scale")
    if not ("mean" in config and "variance" in config) or isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise CheckpointError(
            f"{path!r}: config has {'mean' if 'mean' in config else 'variance'}={config.get('mean', config.get('variance'))!r}; "
            "keras-hub's ImageConverter reads its old arguments mean and variance together, with a single number "
            "as scale, and fails otherwise.")
    mean = _per_channel(config, "mean", path, 0.0)
    variance = _per_channel(config, "variance", path, 1.0, positive=True)
    std = [float(np.sqrt(v)) for v in variance]
    return [s / d for s, d in zip(scale, std)], [-m / d for m, d in zip(mean, std)]


def _norm_mean_std(config, scale, offset, path):
    """``(scale, offset)`` of keras-hub's earlier ``ViTImageConverter`` / ``DeiTImageConverter``, whose ``call`` took
    ``(x * scale + offset - norm_mean) / norm_std`` after the base converter, each only where set (truthy)."""
    mean = _per_channel(config, "norm_mean", path, 0.0) if config.get("norm_mean") else [0.0] * 3
    std = _per_channel(config, "norm_std", path, 1.0, positive=True) if config.get("norm_std") else [1.0] * 3
    return [s / d for s, d in zip(scale, std)], [(o - m) / d for o, m, d in zip(offset, mean, std)]


class Preset:
    """A keras-hub preset folder; ``reads`` says in errors which presets keras_vit reads."""

    def __init__(self, folder, reads):
        self.folder, self.reads = os.fspath(folder), reads

    def file(self, name):
        return os.path.join(self.folder, name)

    def object(self, name, expected):
        """``(config, path)`` of the serialised keras-hub object in ``name``, checked to be one of ``expected``."""
        path = self.file(name)
        content = config_lib.read_json(path)
        found = content.get("class_name")
        expected = (expected,) if isinstance(expected, str) else tuple(expected)
        if found not in expected:
            raise CheckpointError(
                f"{path!r} is a keras-hub {found!r} where keras_vit reads a {' or '.join(expected)}. keras_vit reads "
                f"keras-hub's {self.reads}. keras-hub's other presets are not read: load those models' Hugging Face "
                "repositories (hf://...) instead."
            )
        return config_lib.json_object(content.get("config"), path, "config"), path

    def class_name(self, name):
        """The ``class_name`` of a JSON file of the preset."""
        return config_lib.read_json(self.file(name)).get("class_name")

    def normalization(self, reading, converter, default=None):
        """``reading``'s input mean and std from the image converter's scale and offset (without a converter:
        ``default``, ``(label, (mean, std))`` of the published presets, or None: keras_vit's [-1, 1])."""
        path = self.file(IMAGE_CONVERTER_FILE)
        if not os.path.isfile(path):
            if default is not None:
                reading.mean, reading.std = map(list, default[1])
            reading.notes.append(f"no {IMAGE_CONVERTER_FILE}: " + (
                f"the input scaling of keras-hub's published presets of {reading.architecture} ({default[0]} mean and std)"
                if default else "the input scaling is keras_vit's [-1, 1] (keras-hub's backbone takes whatever its "
                "preprocessing gives it)"))
            return
        config, _ = self.object(IMAGE_CONVERTER_FILE, converter)
        scale = _per_channel(config, "scale", path, 1.0, positive=True)
        offset = _per_channel(config, "offset", path, 0.0)
        if "mean" in config or "variance" in config:
            scale, offset = _old_mean_variance(config, scale, path)
        if config.get("norm_mean") or config.get("norm_std"):
            scale, offset = _norm_mean_std(config, scale, offset, path)
        reading.mean, reading.std = mean_std(scale, offset)
        reading.notes.append(
            f"input scaling from {IMAGE_CONVERTER_FILE}: scale={scale}, offset={offset} -> "
            f"input_mean={[round(v, 6) for v in reading.mean]}, input_std={[round(v, 6) for v in reading.std]}"
        )

    def class_names(self):
        """The class names a keras_vit export wrote into ``metadata.json``, or None."""
        path = self.file(METADATA_FILE)
        if not os.path.isfile(path):
            return None
        names = config_lib.read_json(path).get("class_names")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            raise CheckpointError(f"{path!r}: class_names={names!r}, expected a list of strings.")
        return names

    def weight_files(self):
        """The backbone's ``.weights.h5`` files: ``model.weights.h5``, or the shards ``model.weights.json`` names."""
        single = self.file(MODEL_WEIGHTS_FILE)
        if os.path.isfile(single):
            return [single]
        index = self.file(SHARDED_WEIGHTS_FILE)
        if not os.path.isfile(index):
            raise CheckpointError(
                f"keras-hub preset {self.folder!r} has neither {MODEL_WEIGHTS_FILE} nor {SHARDED_WEIGHTS_FILE} "
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
                files.add(self.file(shard))
        missing = sorted(os.path.basename(f) for f in files if not os.path.isfile(f))
        if missing or not files:
            raise CheckpointError(f"{index!r} names shard(s) that are not in the folder: {', '.join(missing) or 'none'}.")
        return sorted(files)


def contents(files):
    """``({dataset path: (file, path)}, {group path: the name attribute Keras wrote})`` of every array (the
    optimizer's state left out) and group in ``files``."""
    import h5py  # deferred: h5py (a Keras dependency), for keras-hub presets only

    found, groups = {}, {}
    for file in files:
        try:
            with h5py.File(file, "r") as h5:
                items = []
                h5.visititems(lambda name, obj: items.append(
                    (name, isinstance(obj, h5py.Dataset), obj.attrs.get("name"))))
        except OSError as error:
            raise CheckpointError(f"Cannot read {file!r} as HDF5 (.weights.h5): {error}") from error
        for name, is_array, label in items:
            if not is_array:
                groups[name] = label.decode() if isinstance(label, bytes) else label
            elif name in found:
                raise CheckpointError(f"{name!r} is in two shards, {found[name][0]!r} and {file!r}.")
            elif not name.startswith("optimizer/"):
                found[name] = (file, name)
    return found, groups


def arrays(plan, stand_ins=False):
    """``{canonical key: np.ndarray}`` of a plan ``{canonical key: (file, dataset path)}``, every array read now (a
    damaged file fails here, named); ``stand_ins``: zeros of the stored shapes instead, no data read."""
    import h5py  # deferred: h5py, for keras-hub presets only

    out = {}
    for key, (file, name) in plan.items():
        try:
            with h5py.File(file, "r") as h5:
                out[key] = np.broadcast_to(np.float32(0), h5[name].shape) if stand_ins else np.asarray(h5[name][()])
        except (OSError, KeyError) as error:
            raise CheckpointError(f"Cannot read {name!r} from {file!r}: {error}") from error
    return out
