"""One batch of a ViT called eagerly against the same batch through a traced graph, and what the trace costs.

Why a Keras runtime of ``keras_vit.predict`` (``keras_vit.inference.runtimes.keras_runtime``) runs its first batch
eagerly and the later ones through ``predict_on_batch``, and why the export verification's Keras reference
(``keras_vit.export.common.keras_reference``) calls the model eagerly when the images fit in one batch and goes
through ``model.predict`` when they do not: the trace costs more than one eager batch loses, less than several do.

    python benchmarks/eager_or_traced.py [--model ViTTi16] [--batch 32] [--image-size 224] [--repeats 3]

Prints, in seconds: the first traced call (trace + run), then per repeat a traced call (``tf.function``), an eager
call (``model(x, training=False)``), ``model.predict_on_batch`` (its own predict step, traced at its first call) and
``model.predict`` of the same batch (the same step, through its data iterator).
Randomly initialised weights; the TensorFlow backend; the CPU is printed beside the figures.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViTTi16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    import tensorflow as tf

    import keras_vit
    from keras_vit.hardware.report import describe

    model = getattr(keras_vit, args.model)(num_classes=1000, image_size=args.image_size)
    x = np.random.default_rng(0).uniform(0, 255, (args.batch, args.image_size, args.image_size, 3)).astype("float32")
    traced = tf.function(lambda t: model(t, training=False))
    start = time.perf_counter()
    traced(x)
    rows = {"first_traced_call": round(time.perf_counter() - start, 3), "repeats": []}
    for _ in range(args.repeats):
        row = {}
        for name, call in (("traced", traced), ("eager", lambda t: model(t, training=False)),
                           ("predict_on_batch", model.predict_on_batch),
                           ("predict", lambda t: model.predict(t, batch_size=len(t), verbose=0))):
            start = time.perf_counter()
            np.asarray(call(x))
            row[name] = round(time.perf_counter() - start, 3)
        rows["repeats"].append(row)
    print(json.dumps({"model": args.model, "batch": args.batch, "image_size": args.image_size,
                      "cpu": describe()[0], **rows}, indent=1))


if __name__ == "__main__":
    main()
