"""What a training run is: :class:`TrainConfig`, the domain of each field, and the settings a resumed run keeps.

* :class:`TrainConfig` -- the arguments of ``keras-vit train``, each checked
  against its domain (:data:`FIELD_DOMAINS`, :mod:`keras_vit.domains`) when the
  config is made; the command's flags take their ``argparse`` types from the
  same table, so the two refuse the same values.
* :data:`RUN_SETTINGS` and :func:`reconcile` -- the settings that make a run
  what it is (model, data, batch, schedule, augmentation, ...). They are
  stored with each backup (:func:`keras_vit.train.backup.stored_settings`); a
  run resumed in the same folder takes those it is not given from there and
  refuses those given with another value, naming each.

Example:
>>> TrainConfig(label_smoothing=1.5)
Traceback (most recent call last):
...
ValueError: `label_smoothing` must be in [0, 1). Received: label_smoothing=1.5
>>> stored = dict(TrainConfig(model="micro", accumulate=3, ema=0.9).resolved().settings())
>>> config, taken = reconcile(TrainConfig(model="micro"), stored, where="runs/demo/backup")
>>> (config.accumulate, config.ema), taken
((3, 0.9), {'accumulate': 3, 'ema': 0.9})
>>> reconcile(TrainConfig(model="mnist"), stored, where="runs/demo/backup")
Traceback (most recent call last):
...
ValueError: The backup in runs/demo/backup was made by another model: --model: stored 'micro', given 'mnist'. ...
"""

import dataclasses
import os

from keras_vit.domains import FRACTION, NON_NEGATIVE, POSITIVE_INT, PROBABILITY, SEED, Choice, Interval, IntSet, Optional
from keras_vit.train import choices
from keras_vit.train.choices import AUGMENTATIONS
from keras_vit.train.choices import MNIST_NAMES
from keras_vit.train.choices import STRATEGIES

PRECISIONS = ("float32", "none", "mixed", "auto", "mixed_bfloat16", "mixed_float16", "bfloat16")  # model_setup.set_precision
# fields that default to the model's recipe (keras_vit.train.recipes) when left None
FROM_RECIPE = ("epochs", "batch_size", "lr", "optimizer", "weight_decay", "warmup_epochs", "label_smoothing", "drop_path", "jit")
# what the other fields left None become (on a fresh run; a resumed run takes its stored settings first)
DEFAULTS = dict(
    model="mnist", dataset="mnist", accumulate=1, freeze_blocks=0, randaugment=False, mixup=0.0, cutmix=0.0,
    validation_fraction=0.0, mixed_precision=False, strategy="none", seed=0,
)
# the settings that make a run what it is: stored with its backups, kept when it resumes (the others, such as
# output, verbose, tensorboard, jit, save_freq, strategy and data_dir, may change between attempts)
RUN_SETTINGS = (
    "model", "dataset", "image_size", "epochs", "steps_per_epoch", "batch_size", "accumulate", "ema", "lr", "optimizer",
    "weight_decay", "warmup_epochs", "label_smoothing", "layer_decay", "freeze_blocks", "lora", "drop_path", "weights",
    "augment", "randaugment", "mixup", "cutmix", "validation_fraction", "mixed_precision", "seed", "naflex",
)  # fmt: skip
# the domain of each field (None: not set); `keras-vit train` builds its flags' types from this table
FIELD_DOMAINS = {
    "image_size": Optional(POSITIVE_INT),
    "epochs": Optional(POSITIVE_INT),
    "steps_per_epoch": Optional(POSITIVE_INT),
    "batch_size": Optional(POSITIVE_INT),
    "accumulate": Optional(choices.ARGUMENT_DOMAINS["accumulate"]),
    "ema": choices.ARGUMENT_DOMAINS["ema"],
    "lr": Optional(choices.ARGUMENT_DOMAINS["learning_rate"]),
    "optimizer": Optional(choices.ARGUMENT_DOMAINS["name"]),
    "weight_decay": choices.ARGUMENT_DOMAINS["weight_decay"],
    "warmup_epochs": Optional(NON_NEGATIVE),
    "label_smoothing": Optional(FRACTION),
    "layer_decay": choices.ARGUMENT_DOMAINS["layer_decay"],
    "freeze_blocks": Optional(Interval(-1, integer=True)),  # -1: every block
    "lora": Optional(POSITIVE_INT),  # the rank of LoRA factors (keras_vit.enable_lora); None: full fine-tuning
    "drop_path": Optional(FRACTION),
    "augment": Optional(Choice(*AUGMENTATIONS)),
    "randaugment": Optional(Choice(False, True)),
    "mixup": Optional(PROBABILITY),
    "cutmix": Optional(PROBABILITY),
    "validation_fraction": Optional(FRACTION),
    "mixed_precision": Optional(Choice(False, True, *PRECISIONS)),
    "strategy": Optional(Choice(*STRATEGIES)),
    "save_freq": Optional(POSITIVE_INT),
    "seed": Optional(SEED),
    "naflex": Optional(IntSet()),  # patch budgets: a NaFlex model on images of their own aspect ratio
    "verbose": Choice("auto", 0, 1, 2),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What to train, on what, and how: the arguments of ``keras-vit train``.

    Each field is checked against its domain (:data:`FIELD_DOMAINS`) when the
    config is made: a ``ValueError`` names the field, the domain and the value.
    Fields left None take, in this order, the stored settings of the run being
    resumed in ``output`` (:func:`reconcile`), the model's recipe
    (:func:`keras_vit.train.recipes.recipe`; the fine-tuning recipe when
    ``weights`` is given) or :data:`DEFAULTS`: see :meth:`resolved`.

    Attributes:
        model: a model name (:func:`keras_vit.train.recipes.model_names`; default ``"mnist"``).
        dataset: ``"mnist"`` (the offline subset, default), ``"tfds:NAME"`` or an image folder.
        data_dir: the TFDS data directory.
        image_size: input size (default: the model's own).
        epochs, steps_per_epoch: the run's length (default steps: one pass
            over the training images).
        batch_size: the global batch size of each forward and backward pass
            (default: the recipe's, at most the training images of the dataset).
        accumulate: batches per optimizer update (gradient accumulation, default 1): an
            update sees ``accumulate * batch_size`` images, and the steps
            (``steps_per_epoch``, ``save_freq``, warmup, the schedule) count updates.
        ema: the decay, in [0, 1), of an exponential moving average of the weights
            (e.g. :data:`keras_vit.train.optimizers.EMA_DECAY`, 0.9998),
            updated after each update; evaluation, ``model.keras`` and
            exports use it. None or 0: no average.
        lr, optimizer, weight_decay, warmup_epochs, label_smoothing: the
            recipe (:func:`keras_vit.train.optimizers.build_optimizer`).
        layer_decay: layer-wise learning-rate decay in (0, 1] (fine-tuning), e.g. 0.75.
        freeze_blocks: freeze the embedding and the first N blocks (-1: all; default 0: nothing frozen).
        lora: train LoRA factors of this rank on every block's attention and MLP projections, and the head,
            with the rest frozen (:func:`keras_vit.enable_lora`); ``model.keras`` holds the merged weights.
        drop_path: stochastic depth rate in [0, 1).
        weights: the weights to fine-tune from (new zero head), any source
            :func:`keras_vit.train.recipes.build_model` takes, resized to ``image_size``.
        augment: ``"none"``, ``"digits"`` or ``"inception"`` (default:
            digits for MNIST, inception otherwise); ``randaugment``, ``mixup``
            and ``cutmix`` (probabilities per batch, in [0, 1]) on top.
        validation_fraction: the fraction, in [0, 1), of the training images held out
            for validation after each epoch (MNIST, TFDS and image folders).
        mixed_precision: False (float32), True (the 16-bit type the hardware
            runs natively) or a policy name (:func:`keras_vit.train.model_setup.set_precision`).
        jit: XLA-compile the train step.
        strategy: ``"none"``, ``"mirrored"`` or ``"multi-worker"`` (reads ``TF_CONFIG``).
        save_freq: back up every N steps (default: each epoch).
        seed: the seed of the weights, the shuffling and the augmentation (default 0).
        naflex: None, or the patch budgets (e.g. ``(64, 128, 256)``) of a NaFlex run: the model's NaFlex form takes
            each image at its own aspect ratio, each batch one budget (:mod:`keras_vit.train.naflex_data`);
            evaluation at the largest.
        tensorboard: write TensorBoard logs (``"auto"``: when the package is installed).
        output: the output folder.
        verbose: ``"auto"`` (a progress bar on a terminal, one line per
            epoch otherwise), 0, 1 or 2.
    """

    model: str | None = None
    dataset: str | None = None
    data_dir: str | None = None
    image_size: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    batch_size: int | None = None
    accumulate: int | None = None
    ema: float | None = None
    lr: float | None = None
    optimizer: str | None = None
    weight_decay: float | None = None
    warmup_epochs: float | None = None
    label_smoothing: float | None = None
    layer_decay: float | None = None
    freeze_blocks: int | None = None
    lora: int | None = None
    drop_path: float | None = None
    weights: str | None = None
    augment: str | None = None
    randaugment: bool | None = None
    mixup: float | None = None
    cutmix: float | None = None
    validation_fraction: float | None = None
    mixed_precision: bool | str | None = None
    jit: bool | None = None
    strategy: str | None = None
    save_freq: int | None = None
    seed: int | None = None
    naflex: tuple | None = None
    tensorboard: bool | str = "auto"
    output: str = "runs/train"
    verbose: int | str = "auto"

    def __post_init__(self):
        for name, domain in FIELD_DOMAINS.items():
            object.__setattr__(self, name, domain.check(getattr(self, name), name))
        if self.lora is not None and self.freeze_blocks:
            raise ValueError(
                "--lora freezes every weight but the LoRA factors and the head; --freeze-blocks has nothing left to "
                f"freeze. Received: lora={self.lora}, freeze_blocks={self.freeze_blocks}"
            )
        if self.naflex:
            refused = {name: getattr(self, name) for name in ("randaugment", "mixup", "cutmix") if getattr(self, name)}
            if self.strategy not in (None, "none"):
                refused["strategy"] = self.strategy  # batches of varying sizes: one device only
            if refused:
                raise ValueError(
                    "--naflex batches images of many shapes by their number of patches, on one device: RandAugment, "
                    f"MixUp, CutMix and a distribution strategy are not available with it. Received: naflex={self.naflex}, "
                    + ", ".join(f"{name}={value!r}" for name, value in refused.items())
                )

    def given(self):
        """``{name: value}`` of the run settings that are set (not None)."""
        return {name: getattr(self, name) for name in RUN_SETTINGS if getattr(self, name) is not None}

    def settings(self):
        """``{name: value}`` of every run setting (:data:`RUN_SETTINGS`), as stored with the backups.

        A dataset folder or a weights file is stored by its absolute path: a run resumed from another working
        directory reads the same files.
        """
        stored = {name: getattr(self, name) for name in RUN_SETTINGS}
        for name in ("dataset", "weights"):
            stored[name] = as_path(name, stored[name])
        return stored

    def resolved(self):
        """A copy with the unset fields filled from the model's recipe and :data:`DEFAULTS`, checked.

        Raises:
            ValueError: an unknown model, a field out of its domain.
        """
        defaults = dict(DEFAULTS, model=choices.PRETRAINED if self.weights is not None else DEFAULTS["model"])
        config = dataclasses.replace(self, **{key: value for key, value in defaults.items() if getattr(self, key) is None})
        if config.model not in choices.model_names():
            raise ValueError(f"Unknown model: expected one of {choices.model_names()}. Received: model={config.model!r}")
        from keras_vit.train import recipes  # deferred: recipes builds models (Keras); --help must not start it

        recipe = recipes.recipe(config.model, fine_tune=config.weights is not None)
        return dataclasses.replace(
            config,
            **{key: recipe[key] for key in FROM_RECIPE if getattr(config, key) is None},
            image_size=config.image_size or recipes.default_image_size(config.model, config.weights),
            augment=config.augment or ("digits" if is_mnist(config.dataset) else "inception"),
            ema=config.ema or None,  # a decay of 0 is no average
        )


def is_mnist(dataset):
    return str(dataset).lower() in (*MNIST_NAMES, "tfds:mnist")


def _comparable(name, value):
    """A setting as compared between a stored run and a new attempt: equal meanings compare equal."""
    if name == "ema":
        return value or None  # 0 is no average
    if name == "mixed_precision":
        return {None: False, "float32": False, "none": False, "mixed": True, "auto": True}.get(value, value)
    if name == "naflex":  # a JSON list in the backup, a tuple here
        return tuple(value) if value else None
    if name == "dataset" and isinstance(value, str) and value.lower() in MNIST_NAMES:
        return "mnist"
    return as_path(name, value)


def as_path(name, value):
    """A dataset folder or weights file as an absolute path (the MNIST names and TFDS names stay as they are)."""
    if not isinstance(value, str) or name == "dataset" and (value.lower() in MNIST_NAMES or value.startswith("tfds:")):
        return value
    return os.path.abspath(value) if os.path.exists(value) else value


def reconcile(config, stored, *, where):
    """``(config, taken)``: ``config`` with its unset run settings taken from the ``stored`` ones of a backup.

    ``stored`` (the :meth:`TrainConfig.settings` of the resolved config that
    made the backup, or None: no backup, or one without settings) wins where
    ``config`` leaves a setting unset; ``taken`` lists those that differ from
    what a fresh run would use. A setting given with another value than the
    stored one is refused: one ``ValueError`` names each (flag, stored value,
    given value) and ``where`` (the backup).
    """
    if not stored:
        return config, {}
    given = config.given()
    differ = [
        (name, stored.get(name), value)
        for name, value in given.items()
        if name in stored and _comparable(name, value) != _comparable(name, stored[name])
    ]
    if differ:
        listed = "; ".join(f"--{name.replace('_', '-')}: stored {old!r}, given {new!r}" for name, old, new in differ)
        another = "another model" if "model" in [name for name, _, _ in differ] else "another run"
        raise ValueError(
            f"The backup in {where} was made by {another}: {listed}. Leave these out to resume the stored run "
            "with its settings, or train into another --output"
        )
    unset = {name: stored[name] for name in RUN_SETTINGS if name in stored and name not in given}
    resumed = dataclasses.replace(config, **unset)
    # what a fresh run of the stored model would use: the recipe's values are not news, other values are
    fresh = dataclasses.asdict(
        dataclasses.replace(config, model=resumed.model, weights=resumed.weights, dataset=resumed.dataset).resolved()
    )
    fresh.update(model=DEFAULTS["model"], dataset=DEFAULTS["dataset"], weights=None)
    taken = {name: value for name, value in unset.items() if _comparable(name, value) != _comparable(name, fresh[name])}
    return resumed, taken


def describe(settings):
    """``"accumulate=3, ema=0.9"``."""
    return ", ".join(f"{name}={value}" for name, value in settings.items())

