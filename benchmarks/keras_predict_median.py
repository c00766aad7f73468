"""Median seconds of ViT-B/16 ``predict_on_batch`` (batch 8, 224, float32) after 3 warm-up calls; prints ``median_s X``.

One process, the keras_vit on ``PYTHONPATH``. Two checkouts are compared with farm-bench, pair by pair (see
docs/performance.md, "The Keras model after the TFLite formulation")."""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras_vit
print("keras_vit from", os.path.dirname(keras_vit.__file__), file=sys.stderr)
model = keras_vit.ViTB16(num_classes=1000)
x = np.random.default_rng(0).uniform(0, 255, (8, 224, 224, 3)).astype("float32")
for _ in range(3):
    model.predict_on_batch(x)
times = []
for _ in range(7):
    t = time.perf_counter(); model.predict_on_batch(x); times.append(time.perf_counter() - t)
print("median_s", sorted(times)[3])
