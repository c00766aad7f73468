"""keras-hub presets of ViT and of its family -> the original checkpoint layout, keras-hub not imported.

:mod:`~keras_vit.weights.keras_hub.preset` reads a preset folder's files, :mod:`~keras_vit.weights.keras_hub.vit`
the ``ViTBackbone`` / ``ViTImageClassifier`` presets, :mod:`~keras_vit.weights.keras_hub.family` every family row
(``dinov2``, ``dinov3``, ``siglip``, ``clip``, ``deit``; a new family is a module with its row, listed in :data:`FAMILIES`).
"""

import os

from keras_vit.weights.input_normalization import fold_normalization
from keras_vit.weights.keras_hub import clip, deit, dinov2, dinov3, family, preset, siglip, vit
from keras_vit.weights.source import Source

FAMILIES = {row.backbone: row for row in (dinov2.FAMILY, siglip.FAMILY, clip.FAMILY, deit.FAMILY, dinov3.FAMILY)}
READS = (f"ViT presets ({preset.BACKBONE}, {preset.TASK}), {', '.join(FAMILIES)} (the image towers of SigLIP and CLIP)")


def preset_folder(path):
    """The keras-hub preset folder ``path`` is or whose ``.weights.h5`` it is, else None."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if (os.path.isdir(path) or path.endswith(".weights.h5")) and preset.is_preset(folder):
        return folder
    return None


def reading(folder):
    """``(Preset, Reading)`` of a preset folder: what its JSON files say (see the module docstring)."""
    files = preset.Preset(folder, READS)
    config, path = files.object(preset.CONFIG_FILE, (preset.BACKBONE,) + tuple(FAMILIES))
    row = FAMILIES.get(files.class_name(preset.CONFIG_FILE))
    return files, vit.reading(files, config, path) if row is None else family.reading(row, files, config, path)


class KerasHubSource(Source):
    """A keras-hub preset folder (``config.json`` of a serialised keras-hub object), or its ``model.weights.h5``."""

    name = "keras-hub"
    reads = "file or folder"

    def claims(self, opened):
        return preset_folder(opened.path) is not None

    def describe(self, opened, architecture=None):
        folder = preset_folder(opened.path)
        files, found = reading(folder)
        shapes = {key: tuple(array.shape) for key, array in family.arrays(files, found, stand_ins=True).items()}
        return found.info(folder, self.name, shapes, os.path.join(folder, preset.CONFIG_FILE))

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        files, found = reading(preset_folder(opened.path))
        return fold_normalization(family.arrays(files, found), found.mean, found.std, input_mean, input_std)


SOURCE = KerasHubSource()
