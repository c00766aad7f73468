"""A model of any input size (``image_size=None``) against the fixed-size one, at its native size, in one process.

    python -m benchmarks.dynamic_size --model B/16 --batch-size 8 --seconds 60 --json out.json

Both models hold the same weights and run as ``tf.function``s; their calls
alternate round by round and the median of the per-round time ratios is
reported, so load drift on a shared machine cancels. The dynamic model runs
twice: traced for the images' own shape (what ``model.predict`` does: the
graph is then that of the static model), and traced for
``(None, None, None, 3)`` (what its SavedModel's ``serving_default`` serves:
sizes unknown to the graph, position embeddings resampled every call).
``throughput_ratio`` is the dynamic model's images per second over the static
one's; the CPU is named in the output.
"""

import argparse
import json
import time

import numpy as np


def _models(name, batch_size):
    import keras_vit
    from keras_vit.models import vit

    if name == "tiny":
        config = dict(patch_size=8, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128, classifier_activation=None)
        static, dynamic = keras_vit.ViT(image_size=64, **config), keras_vit.ViT(image_size=None, native_image_size=64, **config)
    else:
        builder = vit.BUILDERS[name]
        static, dynamic = builder(classifier_activation=None), builder(image_size=None, classifier_activation=None)
    dynamic.set_weights(static.get_weights())
    size = static.input_shape[1:]
    images = np.random.default_rng(0).uniform(0, 255, (batch_size,) + size).astype("float32")
    return static, dynamic, images


def run(model="B/16", batch_size=8, seconds=60.0, min_rounds=5):
    """``{"cpu", "model", "batch_size", "rounds", "static_images_per_second", ..., "throughput_ratio_*"}``."""
    import tensorflow as tf

    from keras_vit.hardware.cpu import cpu_info

    static, dynamic, images = _models(model, batch_size)
    x = tf.constant(images)
    any_size = tf.TensorSpec((None, None, None, 3), tf.float32)
    steps = {
        "static": tf.function(lambda v: static(v, training=False)),
        "dynamic_traced_at_shape": tf.function(lambda v: dynamic(v, training=False)),
        "dynamic_any_shape": tf.function(lambda v: dynamic(v, training=False), input_signature=[any_size]),
    }
    outputs = {name: np.asarray(step(x)) for name, step in steps.items()}
    for name, out in outputs.items():  # same weights: the same logits (float32 rounding)
        np.testing.assert_allclose(out, outputs["static"], atol=1e-4, err_msg=name)
    times = {name: [] for name in steps}
    start = time.perf_counter()
    while len(times["static"]) < min_rounds or time.perf_counter() - start < seconds:
        for name, step in steps.items():
            t = time.perf_counter()
            np.asarray(step(x))
            times[name].append(time.perf_counter() - t)
    result = {"cpu": cpu_info().model, "model": model, "batch_size": batch_size, "rounds": len(times["static"])}
    for name, values in times.items():
        result[f"{name}_images_per_second"] = round(batch_size / float(np.median(values)), 2)
        if name != "static":
            ratios = np.asarray(times["static"]) / np.asarray(values)
            result[f"throughput_ratio_{name}"] = round(float(np.median(ratios)), 4)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="B/16", help="a variant (B/16, S/16...) or 'tiny' (default B/16)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0, help="time spent alternating the models")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    result = run(args.model, args.batch_size, args.seconds)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(result, command="python -m benchmarks.dynamic_size " + " ".join(argv or [])), f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
