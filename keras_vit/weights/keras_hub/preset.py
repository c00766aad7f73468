"""The files of a keras-hub preset folder, read with ``json`` and ``h5py`` (keras-hub not imported): its serialised
objects checked by class, the image converter's scaling, ``metadata.json``'s class names, the ``.weights.h5``
datasets. The files and variable paths: :mod:`keras_vit.weights.keras_hub_layout`.
"""

import json
import os

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import keras_hub_layout as layout
from keras_vit.weights.input_normalization import channels


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
        path = self.file(layout.IMAGE_CONVERTER_FILE)
        if not os.path.isfile(path) and default is not None:
            label, (reading.mean, reading.std) = default[0], map(list, default[1])
            reading.notes.append(f"no {layout.IMAGE_CONVERTER_FILE}: the input scaling of keras-hub's published presets "
                                 f"of {reading.architecture} ({label} mean and std)")
            return
        if not os.path.isfile(path):
            reading.notes.append(
                f"no {layout.IMAGE_CONVERTER_FILE}: the input scaling is keras_vit's [-1, 1] (keras-hub's backbone takes "
                "whatever its preprocessing gives it)"
            )
            return
        config, _ = self.object(layout.IMAGE_CONVERTER_FILE, converter)
        scale = _per_channel(config, "scale", path, 1.0, positive=True)
        offset = _per_channel(config, "offset", path, 0.0)
        if "mean" in config or "variance" in config:
            scale, offset = _old_mean_variance(config, scale, path)
        reading.mean, reading.std = layout.mean_std(scale, offset)
        reading.notes.append(
            f"input scaling from {layout.IMAGE_CONVERTER_FILE}: scale={scale}, offset={offset} -> "
            f"input_mean={[round(v, 6) for v in reading.mean]}, input_std={[round(v, 6) for v in reading.std]}"
        )

    def class_names(self):
        """The class names a keras_vit export wrote into ``metadata.json``, or None."""
        path = self.file(layout.METADATA_FILE)
        if not os.path.isfile(path):
            return None
        names = config_lib.read_json(path).get("class_names")
        if names is None:
            return None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CheckpointError(f"{path!r}: class_names={names!r}, expected a list of strings.")
        return names

    def weight_files(self):
        """The backbone's ``.weights.h5`` files: ``model.weights.h5``, or the shards ``model.weights.json`` names."""
        single = self.file(layout.MODEL_WEIGHTS_FILE)
        if os.path.isfile(single):
            return [single]
        index = self.file(layout.SHARDED_WEIGHTS_FILE)
        if not os.path.isfile(index):
            raise CheckpointError(
                f"keras-hub preset {self.folder!r} has neither {layout.MODEL_WEIGHTS_FILE} nor {layout.SHARDED_WEIGHTS_FILE} "
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

    def where(self, files):
        """How an error names ``files``: one file's name, or the shards of the index."""
        return os.path.basename(files[0]) if len(files) == 1 else "the shards of " + layout.SHARDED_WEIGHTS_FILE


def datasets(files):
    """``{dataset path: (file, path)}`` of every array in ``files`` (the optimizer's state left out)."""
    import h5py  # deferred: h5py (a Keras dependency), for keras-hub presets only

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


def group_names(file):
    """``{group path: the name attribute Keras wrote}`` of a ``.weights.h5``."""
    import h5py  # deferred: h5py, for keras-hub presets only

    names = {}
    with h5py.File(file, "r") as h5:
        h5.visititems(lambda name, obj: names.__setitem__(name, obj.attrs.get("name")) if isinstance(obj, h5py.Group) else None)
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in names.items()}


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
