"""Top-1 agreement of the fast paths with float32 Keras, on real images, for a trained model.

No trained ViT-B/16 can be had offline, so the model is the main job's
(``make train`` writes ``runs/mnist/model.keras``) and the images are the
1,000 held-out digits of the offline MNIST subset it never trained on.
"""

import os

import numpy as np

from benchmarks import common, tf_setup


def _test_images():
    from keras_vit.train import data

    test = data.load_mnist().test
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in test])
    return np.stack(images).astype("float32"), np.asarray(labels)


def _rebuilt(model, policy):
    """The same architecture and weights under another dtype policy."""
    import keras
    from keras_vit.train import recipes

    keras.config.set_dtype_policy(policy)
    try:
        clone = recipes.build_model("mnist", num_classes=model.output_shape[-1])
    finally:
        keras.config.set_dtype_policy("float32")
    clone.set_weights(model.get_weights())
    return clone


def agreement(task):
    """One record per fast path: ``top1_agreement`` and accuracy against float32 Keras."""
    tf_setup.tensorflow(task)
    import keras

    path = task["trained_model"]
    if not os.path.exists(path):
        return common.make_record(task, status="skipped", reason=f"no trained model at {path} (run `make train`)")
    from keras_vit.saving import load_model

    model = load_model(path)
    x, y = _test_images()
    if task.get("quick"):
        x, y = x[:64], y[:64]
    reference = np.asarray(model.predict(x, batch_size=100, verbose=0), dtype="float32")
    runtime, precision = task["runtime"], task["precision"]
    if runtime == "tflite-dynamic":
        from keras_vit.export import tflite

        actual = tflite.run(tflite.convert(model, "dynamic", batch_size=1), x, num_threads=int(task.get("threads", 2)))
    else:
        policy = {"bfloat16": "mixed_bfloat16", "bfloat16-weights": "bfloat16"}[precision]
        fast = _rebuilt(model, policy)
        actual = np.asarray(keras.ops.cast(fast.predict(x, batch_size=100, verbose=0), "float32"))
    top1 = float(np.mean(actual.argmax(-1) == reference.argmax(-1)))
    return common.make_record(
        task, status="ok", top1_agreement=round(top1, 4), images=len(x),
        max_abs_diff=float(np.max(np.abs(actual - reference))),
        accuracy=round(float(np.mean(actual.argmax(-1) == y)), 4),
        float32_accuracy=round(float(np.mean(reference.argmax(-1) == y)), 4),
    )
