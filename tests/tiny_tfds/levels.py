"""A tiny TensorFlow Datasets builder, prepared offline from generated images, for the ``tfds:`` source.

It lives in a module of a package, as TFDS' own builders do (``tensorflow_datasets.image_classification.cifar``):
preparing such a builder reads ``importlib_resources`` (``DatasetBuilder.code_path``), as ``tfds:cifar10`` does.
"""

import numpy as np
import tensorflow_datasets as tfds

NAME = "keras_vit_tiny_levels"  # TFDS registers the class under its snake-case name
CLASS_NAMES = ["dark", "light"]
SPLITS = {"train": 6, "test": 4}
SIZE = (8, 6)


def tiny_image(index):
    """Grayscale image ``index`` (one channel, as MNIST's): class ``index % 2``, dark (40 + index) or light (200 + index)."""
    level = (40 if index % 2 == 0 else 200) + index
    return np.full(SIZE + (1,), level, np.uint8)


class KerasVitTinyLevels(tfds.core.GeneratorBasedBuilder):
    """Dark and light 8x6 grayscale images, 6 for training and 4 for testing."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {"image": tfds.features.Image(shape=SIZE + (1,)), "label": tfds.features.ClassLabel(names=CLASS_NAMES)}
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing to download
        first = {"train": 0, "test": SPLITS["train"]}
        return {split: self._generate_examples(first[split], count) for split, count in SPLITS.items()}

    def _generate_examples(self, first, count):
        for index in range(first, first + count):
            yield index, {"image": tiny_image(index), "label": index % 2}


def prepare(data_dir):
    """Prepare the dataset in ``data_dir`` (``download_and_prepare``: nothing to download)."""
    tfds.builder(NAME, data_dir=str(data_dir)).download_and_prepare()
