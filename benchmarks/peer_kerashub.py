"""keras-hub's ViT (the other Keras ViT) on the same TensorFlow; run with the peer environment's Python."""


import numpy as np

from benchmarks import common, tf_setup


def inference(task):
    """Images/s of ``keras_hub.models.ViTBackbone`` + classifier head, under ``tf.function`` (XLA or not)."""
    tf = tf_setup.tensorflow(task)
    import keras
    import keras_hub

    tf_setup.set_precision(task["precision"])
    c = common.MODELS[task["model"]]
    size = c["image_size"]
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(size, size, 3),
        patch_size=c["patch_size"],
        num_layers=c["num_layers"],
        num_heads=c["num_heads"],
        hidden_dim=c["hidden_size"],
        mlp_dim=c["mlp_dim"],
    )
    inputs = keras.Input((size, size, 3))
    tokens = backbone(inputs)
    outputs = keras.layers.Dense(1000, dtype="float32")(tokens[:, 0])
    model = keras.Model(inputs, outputs)
    batch = int(task["batch_size"])
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype("float32"))
    fn = tf.function(lambda images: model(images, training=False), jit_compile=task["runtime"] == "keras-hub-xla")

    def step():
        np.asarray(fn(x))

    record = common.measure(task, step)
    record["versions"] = f"keras-hub {keras_hub.__version__}"
    return record
