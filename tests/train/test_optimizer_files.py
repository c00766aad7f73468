"""A model compiled with ``build_optimizer``'s optimizers loads with ``keras.saving.load_model`` in a fresh process
that imported only ``keras_vit`` and ``keras``, as a model compiled with Keras' own optimizers does.

``keras_vit`` registers its classes with Keras when Keras is imported (``keras_vit._REGISTERING``); the optimizers
of ``keras_vit.train`` were left out, so a file compiled with layer decay or gradient accumulation raised
``TypeError: Could not locate class 'LayerDecayAdamW'`` until the user imported ``keras_vit.train.optimizers``.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("options", [dict(layer_decay=0.75), dict(name="sgd", accumulate=2)])
def test_a_file_compiled_with_build_optimizer_loads_in_a_fresh_process(options, tmp_path):
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=2)
    if "layer_decay" in options:
        options = dict(options, model=model)
    model.compile(optimizer=keras_vit.build_optimizer(1e-3, total_steps=4, **options), loss="categorical_crossentropy")
    model.fit(np.zeros((2, 16, 16, 3), "float32"), np.eye(2, dtype="float32"), verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    code = ("import keras_vit, keras; m = keras.saving.load_model(%r); print(type(m.optimizer).__name__, "
            "int(m.optimizer.iterations))" % path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == [type(model.optimizer).__name__, str(int(model.optimizer.iterations))]
