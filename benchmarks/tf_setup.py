"""TensorFlow/Keras set-up for a worker: threads, dtype policy, models, inputs."""

import numpy as np

from benchmarks import common

# "bfloat16": mixed precision (float32 weights, cast per call); "bfloat16-weights": weights stored in bfloat16
PRECISION_POLICIES = {
    "float32": "float32", "bfloat16": "mixed_bfloat16", "bfloat16-weights": "bfloat16", "float16": "mixed_float16",
}


def tensorflow(task):
    import tensorflow as tf

    threads = int(task.get("threads", 2))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1 if threads <= 2 else 2)
    return tf


def set_precision(precision):
    import keras

    if precision not in PRECISION_POLICIES:
        raise ValueError(f"Unknown precision: expected one of {tuple(PRECISION_POLICIES)}. Received: precision={precision!r}")
    keras.config.set_dtype_policy(PRECISION_POLICIES[precision])


def build_model(model, num_classes=1000):
    """A keras_vit model for a benchmark name: a paper variant, ``tiny`` or ``main`` (the main job's model)."""
    if model == "main":
        from keras_vit.train import recipes

        return recipes.build_model("mnist", num_classes=10)
    if model not in common.MODELS:
        raise ValueError(f"Unknown benchmark model: expected one of {(*common.MODELS, 'main')}. Received: model={model!r}")
    import keras_vit

    if model in common.REGISTERED:  # timm's registration as keras_vit reads it (its head or none, as timm's)
        from keras_vit.weights import timm_config

        fields = timm_config.config_fields(common.REGISTERED[model]["timm"])
        return keras_vit.ViT(**{**fields, "image_size": common.MODELS[model]["image_size"]})
    return keras_vit.ViT(**common.MODELS[model], num_classes=num_classes)


def images(model, batch_size, seed=0):
    shape = model.input_shape[1:]
    return np.random.default_rng(seed).uniform(0, 255, (batch_size, *shape)).astype("float32")
