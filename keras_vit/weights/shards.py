"""The weight files of a checkpoint folder: ``model.safetensors``, or the shards that ``model.safetensors.index.json`` names.

A ``save_pretrained`` folder holds one ``model.safetensors`` or, for large
models, shards listed by an index (``{"weight_map": {tensor: shard file}}``).
:func:`folder_files` finds the files to read; :func:`check_index` checks, once
they are read, that each tensor is in the shard its index names (shards of two
downloads mixed up would load another model's tensors).
"""

import os

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.pickles import PICKLE_SUFFIXES, refuse_pickle


def folder_files(folder):
    """The ``.safetensors`` files of a folder and its ``config.json`` (or None)."""
    config = os.path.join(folder, "config.json")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        files = [os.path.join(folder, shard) for shard in sorted(set(read_index(index).values()))]
    elif os.path.isfile(os.path.join(folder, "model.safetensors")):
        files = [os.path.join(folder, "model.safetensors")]
    else:
        files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not files:
        pickles = sorted(n for n in os.listdir(folder) if n.endswith(PICKLE_SUFFIXES))
        if pickles:
            refuse_pickle(os.path.join(folder, pickles[0]), f"a folder whose only weights are pickle files ({', '.join(pickles)})")
        presets = sorted(n for n in os.listdir(folder) if n.endswith(".weights.h5"))
        if presets:  # a keras-hub preset whose config.json does not say so
            raise CheckpointError(
                f"Folder {folder!r} holds {', '.join(presets)} and no .safetensors file, as a keras-hub preset does, "
                "but its config.json has no 'registered_name' starting with 'keras_hub>' (keras-hub's save_to_preset "
                "writes one, e.g. 'keras_hub>ViTBackbone'), so it is read as no preset. Fix config.json, or save the "
                "preset again with save_to_preset."
            )
        raise CheckpointError(f"Folder {folder!r} holds no model.safetensors (nor any .safetensors file).")
    return files, (config if os.path.isfile(config) else None)


def read_index(index):
    """The ``weight_map`` of a sharded index, checked: a JSON object of tensor name -> shard file in the folder.

    Every value must be the name of a file beside the index (a relative path that stays inside the
    folder: no absolute path, no ``..``); an index that is not of that shape is refused naming the
    file and the key, before any shard is opened.

    Example:
    >>> import json, os, tempfile
    >>> index = os.path.join(tempfile.mkdtemp(), "model.safetensors.index.json")
    >>> with open(index, "w") as f:
    ...     json.dump({"weight_map": {"x": 3}}, f)
    >>> read_index(index)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    keras_vit.errors.CheckpointError: '...index.json': weight_map['x']=3, expected the name of a shard file (a string).
    """
    content = config_lib.read_json(index)
    if "weight_map" not in content:
        raise CheckpointError(f"{index!r} has no weight_map (tensor name -> shard file); the index is damaged.")
    weight_map = config_lib.json_object(content["weight_map"], index, "weight_map")
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(
                f"{index!r}: weight_map[{key!r}]={shard!r}, expected the name of a shard file (a string)."
            )
        normal = os.path.normpath(shard)
        if os.path.isabs(shard) or normal == ".." or normal.startswith(".." + os.sep) or normal == "." or "\0" in shard:
            raise CheckpointError(
                f"{index!r}: weight_map[{key!r}]={shard!r} is not a file inside the folder of the index "
                "(an absolute path or one that leaves it with '..'); shards are named relative to the folder."
            )
    return weight_map


def check_index(folder, tensors):
    """The shards of a sharded folder hold exactly the tensors its index maps to them (no mixed-up shard)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.isfile(index):
        return
    weight_map = read_index(index)
    found = {key: os.path.basename(file) for key, file in tensors.where.items()}
    wrong = sorted(k for k in set(weight_map) | set(found) if found.get(k) != weight_map.get(k))
    if wrong:
        shown = "; ".join(
            f"{k!r}: index says {weight_map.get(k)!r}, found in {repr(found[k]) if k in found else 'no shard'}"
            for k in wrong[:5]
        )
        raise CheckpointError(
            f"{index!r} does not match its shards ({len(wrong)} tensor(s): {shown}"
            f"{' ...' if len(wrong) > 5 else ''}); "
            "the shards and the index come from different downloads. Download the model again."
        )
