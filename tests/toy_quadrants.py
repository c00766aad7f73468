"""The toy localisation task of the rollout test (tests/inspect/test_attention.py): a red square (the object) in one
quadrant of a 16 x 16 image and a green one (a distractor) in another; the label is the red square's quadrant.

    python tests/toy_quadrants.py      # writes tests/fixtures/trained/toy_quadrants.keras

The stored file is this module's :func:`train` from seed 0 (about 15 s of a 2-core run, which the suite then
skips); rerun it when :func:`train` changes. The suite trains a model itself when the file is missing.
"""

import os

import numpy as np

STORED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "trained", "toy_quadrants.keras")


def squares(n, rng, size=16, patch=4):
    """``(x, y)``: ``n`` images, each with a red square in quadrant ``y`` (0 top-left, 1 top-right, 2 bottom-left,
    3 bottom-right) and a green one in another; squares cover one patch."""
    x = rng.uniform(0, 40, (n, size, size, 3)).astype("float32")
    y = rng.integers(0, 4, n)
    half = size // 2
    for i in range(n):
        other = (y[i] + rng.integers(1, 4)) % 4
        for quadrant, colour in ((y[i], (255, 0, 0)), (other, (0, 255, 0))):
            qr, qc = divmod(int(quadrant), 2)
            r = qr * half + patch * rng.integers(0, half // patch)
            c = qc * half + patch * rng.integers(0, half // patch)
            x[i, r : r + patch, c : c + patch] = colour
    return x, y


def train(path):
    """A tiny ViT (16 x 16, patches of 4) trained on 1,024 images until 98 % training accuracy (at most 30 epochs),
    saved to ``path``; returns ``path``."""
    import keras

    import keras_vit
    from keras_vit.train.resumable import build_optimizer_slots

    class StopAtAccuracy(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if logs and logs.get("accuracy", 0) >= 0.98:
                self.model.stop_training = True

    keras.utils.set_random_seed(0)
    x, y = squares(1024, np.random.default_rng(0))
    model = keras_vit.ViT(image_size=16, patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=4)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    build_optimizer_slots(model)  # one trace of the step instead of two (keras_vit.train.resumable)
    model.fit(x, y, epochs=30, batch_size=64, verbose=0, callbacks=[StopAtAccuracy()])
    keras_vit.save_model(model, str(path), include_optimizer=False)
    return str(path)


if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    print(train(STORED), os.path.getsize(STORED), "bytes")
