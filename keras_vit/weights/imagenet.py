"""The ImageNet-1k and ImageNet-21k class lists of the original checkpoints' heads, and which one a pretrained head has.

The lists under ``keras_vit/weights/assets/`` come from timm 1.0.31 (``timm/data/_info/``, Apache-2.0): the WordNet
ids in the order of the original ViT heads (``imagenet21k_goog_synsets.txt`` for the 21,843-class imagenet21k
checkpoints) joined with their lemmas.
"""

import functools
import os

IMAGENET1K = "imagenet1k"
IMAGENET21K = "imagenet21k"
DATASETS = {IMAGENET1K: ("imagenet1k_labels.txt", 1000), IMAGENET21K: ("imagenet21k_labels.txt", 21843)}
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


@functools.lru_cache(maxsize=None)
def imagenet_classes(dataset=IMAGENET1K):
    """``[(wordnet_id, lemmas), ...]`` of ``"imagenet1k"`` or ``"imagenet21k"``, in head order.

    Example:
    >>> imagenet_classes("imagenet1k")[0]
    ('n01440764', 'tench, Tinca tinca')
    """
    if dataset not in DATASETS:
        raise ValueError(f"Unknown label set: expected one of {tuple(DATASETS)}. Received: dataset={dataset!r}")
    filename, count = DATASETS[dataset]
    with open(os.path.join(_DATA_DIR, filename), encoding="utf-8") as f:
        rows = [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip() and not line.startswith("#")]
    if len(rows) != count:
        raise RuntimeError(f"{filename} holds {len(rows)} classes, expected {count}")
    return tuple(rows)


def imagenet_labels(dataset=IMAGENET1K):
    """Short class names (the first lemma) of an ImageNet head, e.g. ``'tench'``."""
    return [lemmas.split(",")[0].strip() for _, lemmas in imagenet_classes(dataset)]


def imagenet_dataset_of(tag, num_classes):
    """The ImageNet label set a pretrained head was trained on, or None: the dataset its preset or timm ``tag`` ends
    with, when the number of classes is that dataset's.

    Example:
    >>> imagenet_dataset_of("augreg_in21k_ft_in1k", 1000), imagenet_dataset_of("imagenet21k", 21843)
    ('imagenet1k', 'imagenet21k')
    >>> imagenet_dataset_of("augreg_in21k_ft_in1k", 10) is None, imagenet_dataset_of(None, 1000) is None
    (True, True)
    """
    endings = {IMAGENET1K: ("in1k", "imagenet2012", "imagenet1k"), IMAGENET21K: ("in21k", "imagenet21k")}
    for dataset, suffixes in endings.items():
        if tag and str(tag).lower().endswith(suffixes) and num_classes == DATASETS[dataset][1]:
            return dataset
    return None
