"""float32 and a fast precision in one process, their calls alternated.

On a machine shared with other work the load drifts between measurements;
alternating the two models call by call and taking the median of the
per-round ratios gives the speed-up without that drift.
"""

import time

import numpy as np

from benchmarks import common, tf_setup


def speedup(task):
    """Median over rounds of ``t(float32) / t(precision)`` for ``tf.function`` inference, same weights."""
    tf = tf_setup.tensorflow(task)
    batch = int(task["batch_size"])
    fast = task["precision"]
    models = {}
    for precision in ("float32", fast):
        tf_setup.set_precision(precision)
        models[precision] = tf_setup.build_model(task["model"])
    tf_setup.set_precision("float32")
    models[fast].set_weights(models["float32"].get_weights())
    x = tf.constant(tf_setup.images(models["float32"], batch))
    steps = {}
    for precision, model in models.items():
        fn = tf.function(lambda images, model=model: model(images, training=False))
        steps[precision] = lambda fn=fn: np.asarray(fn(x))
        steps[precision]()
        steps[precision]()
    times = {"float32": [], fast: []}
    start = time.perf_counter()
    while len(times[fast]) < task.get("min_iters", 3) or (
        time.perf_counter() - start < 2 * task.get("min_seconds", 5.0) and len(times[fast]) < 200
    ):
        for precision in times:
            t = time.perf_counter()
            steps[precision]()
            times[precision].append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(times["float32"], times[fast])]
    seconds = float(np.median(times[fast]))
    return common.make_record(
        task, seconds, len(ratios), speedup_over_float32=round(float(np.median(ratios)), 3),
        float32_images_per_second=round(batch / float(np.median(times["float32"])), 3),
    )
