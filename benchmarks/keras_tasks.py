"""Keras measurements: inference (predict, tf.function, XLA) and training steps."""

import time

import numpy as np

from benchmarks import common, tf_setup


def inference(task):
    """Images/s of a keras_vit model: ``keras-predict``, ``keras-function`` or ``keras-xla``."""
    tf = tf_setup.tensorflow(task)
    tf_setup.set_precision(task["precision"])
    model = tf_setup.build_model(task["model"])
    batch = int(task["batch_size"])
    x = tf_setup.images(model, batch)
    runtime = task.get("keras_runtime", task["runtime"])
    if runtime == "keras-predict":
        def step():
            model.predict(x, batch_size=batch, verbose=0)
    elif runtime in ("keras-function", "keras-xla"):
        fn = tf.function(lambda images: model(images, training=False), jit_compile=runtime == "keras-xla")
        xt = tf.constant(x)

        def step():
            np.asarray(fn(xt))
    else:
        raise ValueError(f"Unknown Keras runtime: {runtime!r}")
    start = time.perf_counter()
    step()  # first call: trace and compile
    first_call = time.perf_counter() - start
    probe, probe_gflop = gemm_probe(tf, task["precision"], small=task.get("quick"))
    seconds, iters, gemm_rate = common.time_with_probe(
        step, probe, probe_gflop, min_iters=task.get("min_iters", 3), min_seconds=task.get("min_seconds", 5.0)
    )
    record = common.make_record(task, seconds, iters, first_call_s=round(first_call, 2), gemm_probe_gflops=round(gemm_rate, 2))
    gflop = common.forward_gflop(task["model"])
    if gflop:
        record["fraction_of_concurrent_gemm"] = round(gflop * batch / seconds / gemm_rate, 3)
    return record


def gemm_probe(tf, precision, small=False):
    """Three oneDNN GEMMs of ViT's MLP shape at batch 8 (1576x768 @ 768x3072), in the precision's dtype."""
    dtype = tf.bfloat16 if precision.startswith("bfloat16") else tf.float32
    m, k, n = (64, 64, 64) if small else (1576, 768, 3072)
    a = tf.cast(tf.random.normal((m, k)), dtype)
    b = tf.cast(tf.random.normal((k, n)), dtype)
    fn = tf.function(lambda a, b: tf.linalg.matmul(a, b))

    def probe():
        for _ in range(3):
            fn(a, b).numpy()

    probe()
    return probe, 3 * 2.0 * m * k * n / 1e9


class _StepTimer:
    def __init__(self):
        self.times = []
        self._last = None

    def __call__(self, *_, **__):
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
        self._last = now


def training(task):
    """Images/s of ``model.fit`` steps (AdamW, cross-entropy), with or without XLA."""
    tf = tf_setup.tensorflow(task)
    import keras

    tf_setup.set_precision(task["precision"])
    batch = int(task["batch_size"])
    model = tf_setup.build_model(task["model"], num_classes=10 if task["model"] == "main" else 1000)
    classes = model.output_shape[-1]
    x = tf_setup.images(model, batch)
    y = keras.utils.to_categorical(np.arange(batch) % classes, classes)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(2)
    if task["model"] == "main":  # the main job's real input pipeline
        dataset = _main_job_pipeline(batch)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05, global_clipnorm=1.0),
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=0.1),
        jit_compile=task.get("keras_runtime") == "keras-xla",
    )
    timer = _StepTimer()
    callback = keras.callbacks.LambdaCallback(on_train_batch_end=timer)
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # trace, compile, warm up
    first_call = time.perf_counter() - start
    steps = int(task.get("steps", 3))
    t = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[callback])
    while time.perf_counter() - t < task.get("min_seconds", 5.0) and len(timer.times) < 200:
        timer._last = None
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[callback])
    seconds = float(np.median(timer.times)) if timer.times else (time.perf_counter() - t) / steps
    return common.make_record(task, seconds, len(timer.times), first_call_s=round(first_call, 2))


def _main_job_pipeline(batch):
    from keras_vit.train import recipes
    from keras_vit.train.data import make_pipeline

    _, data, _ = recipes.mnist_job()
    return make_pipeline(data.train, 28, batch, training=True, augment="digits", num_classes=10, seed=0, repeat=True)
