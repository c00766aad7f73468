"""Keras' own tools on a keras_vit model: ``model.quantize("int8")`` and LoRA, against float32, on this CPU.

    python -m benchmarks.keras_tools --json benchmarks/results/keras-tools-b16.json       # ViT-B/16, ~10 min on 2 cores
    python -m benchmarks.keras_tools --model Ti/16 --images 16 --json /tmp/kt.json        # a quick run

Weights are random (offline): every weight drawn as a trained ViT's scale (N(0, 0.02), LayerNorm scales 1,
the head N(0, 0.02)), the same for both models. Records, in the JSON:

* ``weights_bytes``: the bytes of every variable (float32 kernels: 4 bytes a weight; int8: 1, plus the
  float32 scales; what is not quantized stays float32).
* ``latency_ms``: the median of ``model(batch)`` under ``tf.function`` (``--batch-size`` images), the
  ``time_calls`` of benchmarks/common.py; the CPU is named in ``machine``.
* ``agreement``: top-1 agreement and the largest logit difference of int8 with float32 on ``--images``
  random images in [0, 255].
* ``lora``: trainable weights and a training step's time (SGD, ``--batch-size`` images) with LoRA of rank
  ``--rank`` on every projection, against training every weight.
"""

import argparse
import json
import platform
import time

import numpy as np


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _model(variant, seed=0):
    import keras_vit

    model = keras_vit.build_model(keras_vit.ViTConfig(**keras_vit.decode_variant(variant), classifier_activation=None))
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        value = np.ones(shape) if variable.path.endswith(("/gamma", "scale")) else rng.normal(0, 0.02, shape)
        variable.assign(value.astype("float32"))
    return model


def _bytes(model):
    return int(sum(np.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.weights))


def _latency_ms(model, batch):
    import tensorflow as tf  # deferred: the TensorFlow backend's tf.function, as in benchmarks/common.py

    from benchmarks.common import time_calls

    call = tf.function(lambda x: model(x, training=False))
    seconds, iters = time_calls(lambda: call(batch).numpy(), warmup=2, min_iters=5, min_seconds=10.0)
    return 1000 * seconds, iters


def _logits(model, images, batch_size):
    return np.concatenate([np.asarray(model(images[i : i + batch_size])) for i in range(0, len(images), batch_size)])


def _train_step_ms(model, images, labels):
    import keras

    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=keras.losses.MeanSquaredError())
    model.train_on_batch(images, labels)  # traces
    times = []
    for _ in range(3):
        start = time.perf_counter()
        model.train_on_batch(images, labels)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def run(variant, batch_size, num_images, rank):
    import keras_vit

    rng = np.random.default_rng(1)
    size = 224
    images = rng.uniform(0, 255, (num_images, size, size, 3)).astype("float32")
    batch = images[:batch_size]
    record = {"model": variant, "batch_size": batch_size, "images": num_images}

    model = _model(variant)
    reference = _logits(model, images, batch_size)
    record["float32"] = {"weights_bytes": _bytes(model)}
    record["float32"]["latency_ms"], record["float32"]["iters"] = _latency_ms(model, batch)
    model.quantize("int8")
    quantized = _logits(model, images, batch_size)
    record["int8"] = {"weights_bytes": _bytes(model)}
    record["int8"]["latency_ms"], record["int8"]["iters"] = _latency_ms(model, batch)
    record["agreement"] = {
        "top1_agreement": float(np.mean(quantized.argmax(-1) == reference.argmax(-1))),
        "max_abs_logit_diff": float(np.abs(quantized - reference).max()),
        "max_abs_logit": float(np.abs(reference).max()),
    }
    del model

    labels = rng.normal(0, 1, (batch_size, reference.shape[-1])).astype("float32")
    full = _model(variant)
    lora = {"full_trainable": int(sum(np.prod(v.shape) for v in full.trainable_weights))}
    lora["full_step_ms"] = _train_step_ms(full, batch, labels)
    del full
    adapted = _model(variant)
    keras_vit.enable_lora(adapted, rank)
    lora["rank"] = rank
    lora["lora_trainable"] = int(sum(np.prod(v.shape) for v in adapted.trainable_weights))
    lora["lora_step_ms"] = _train_step_ms(adapted, batch, labels)
    merged = keras_vit.merge_lora(adapted)
    lora["merged_max_abs_diff"] = float(np.abs(np.asarray(merged(batch)) - np.asarray(adapted(batch))).max())
    record["lora"] = lora
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.keras_tools", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="B/16", help="a variant (keras_vit.decode_variant), default B/16")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--images", type=int, default=64, help="random images for the agreement")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank")
    parser.add_argument("--json", default=None, help="write the record here")
    args = parser.parse_args(argv)
    import keras

    started = time.time()
    record = run(args.model, args.batch_size, args.images, args.rank)
    record["machine"] = {"cpu": _cpu_name(), "keras": keras.__version__, "python": platform.python_version()}
    record["command"] = "python -m benchmarks.keras_tools " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    record["seconds"] = round(time.time() - started, 1)
    text = json.dumps(record, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
