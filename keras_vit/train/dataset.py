"""``ImageDataset``: what every dataset source of :mod:`keras_vit.train.data` returns."""

import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class ImageDataset:
    """A labelled image dataset, split, with its class names.

    Attributes:
        name: where it came from (``"mnist"``, ``"tfds:cifar10"``, a path).
        class_names: list of class names; label ``i`` is ``class_names[i]``.
        train, test: unbatched ``tf.data.Dataset`` of ``(image, label)``,
            ``uint8 (H, W, 3)`` and ``int32``, in a fixed order.
        validation: the same, or None.
        num_train, num_test, num_validation: sizes of the splits.
        image_shape: ``(H, W, 3)``; H and W are None when images vary.
    """

    name: str
    class_names: list
    train: tf.data.Dataset
    test: tf.data.Dataset
    validation: tf.data.Dataset = None
    num_train: int = 0
    num_test: int = 0
    num_validation: int = 0
    image_shape: tuple = (None, None, 3)

    @property
    def num_classes(self):
        return len(self.class_names)
