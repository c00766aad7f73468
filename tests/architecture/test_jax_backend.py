"""The layers and builders on Keras' JAX backend compute what they compute on TensorFlow.

Keras picks its backend once, at import: the TensorFlow side runs in this (TensorFlow) test process, the
JAX side in one child process, which builds the same tiny models, loads the weights the TensorFlow side
saved, and returns its outputs; they must agree within float32 rounding of two different GEMM libraries
(XLA's CPU dots and oneDNN/Eigen). The same child also says whether importing keras_vit and building a
model on JAX imported TensorFlow. Skipped where jax is not installed (it is in the dev extra).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# builds the models by name in whichever backend runs it, loads weights when a file is given
_BUILD = r"""
import json, sys
import numpy as np
import keras, keras_vit
# three models, each layer of the family in at least one: the XLA compiles of the JAX side (one per variable
# initializer's shape, one per model) are most of this module's time, so each model covers several switches
models = {
    # ViT-Ti/16's widths (3 heads of 64) at 2 of its 12 blocks, a fixed input size, GAP and a pre-logits layer:
    # ViTTi16 itself was a third of this module's time (jax.jit of 12 blocks) for nothing these layers do not
    # check; its builder is backend-free Python
    "ti16_widths_gap_prelogits": lambda: keras_vit.ViT(image_size=32, patch_size=16, hidden_size=192, num_layers=2,
                                                       num_heads=3, mlp_dim=768, num_classes=3, pooling="gap",
                                                       representation_size=16, classifier_activation=None),
    # the class token and its pooling; any size: embeddings stored for 2 x 2 patches and resampled to the 4 x 4
    # of x in the graph
    "vit_any_size": lambda: keras_vit.ViT(image_size=None, native_image_size=16, patch_size=8, hidden_size=32,
                                          num_layers=2, num_heads=4, mlp_dim=64, num_classes=5,
                                          classifier_activation=None),
    # the ResNet stem (StdConv2D, GroupNorm, a unit at stride 1 and one at stride 2) before a fixed-size class token
    "hybrid": lambda: keras_vit.HybridViT(image_size=32, block_units=(1, 1), width=0.5, patch_size=1, hidden_size=32,
                                          num_layers=1, num_heads=4, mlp_dim=64, num_classes=4, classifier_activation=None),
}


def run(folder, save):
    x = np.load(folder + "/x.npy")
    out = {}
    for name, build in models.items():
        if save:  # the weights that are saved; the loading side overwrites its own (and Keras' seeding imports
            keras.utils.set_random_seed(0)  # TensorFlow where it is installed, which the probe below looks for)
        model = build()
        if "probe" not in out:  # before anything else runs: what `import keras_vit` and a build import here
            out["probe"] = [model.count_params(), "tensorflow" in sys.modules]
        path = f"{folder}/{name}.weights.h5"
        if save:
            rng = np.random.default_rng(1)
            for w in model.weights:  # a non-zero head, so the outputs say something
                w.assign(np.asarray(w) + 0.02 * rng.normal(size=w.shape).astype("float32"))
            model.save_weights(path)
        else:
            model.load_weights(path)
        # predict compiles the whole model once (jax.jit / tf.function); op-by-op eager JAX compiles every op
        out[name] = np.asarray(model.predict(x, verbose=0)).tolist()
    out["backend"] = keras.backend.backend()
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2] == "save")))
"""


def _jax(folder):
    # XLA's CPU backend at LLVM -O0: every variable initializer of a build is its own jit (a compile per shape,
    # 0.25 s each at the default level, 80 % of the child's time); the same operations, compiled with less
    # optimisation, which the outputs below still have to match
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               XLA_FLAGS=flags)
    done = subprocess.run([sys.executable, "-c", _BUILD, str(folder), "load"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """``(tensorflow outputs, jax outputs)`` of the same models and weights: TensorFlow here, JAX in a child process."""
    import keras

    assert keras.backend.backend() == "tensorflow"  # this test process (conftest.py)
    folder = tmp_path_factory.mktemp("backends")
    np.save(folder / "x.npy", np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32"))
    namespace = {"__name__": "tensorflow_side"}
    exec(_BUILD, namespace)  # the child's code, run here, where Keras runs on TensorFlow
    return namespace["run"](str(folder), save=True), _jax(folder)


def test_tiny_models_on_jax_match_tensorflow(outputs):
    tf_out, jax_out = (dict(out) for out in outputs)
    assert tf_out.pop("backend") == "tensorflow" and jax_out.pop("backend") == "jax"
    assert tf_out.pop("probe")[0] == jax_out.pop("probe")[0]  # the same parameter count
    for name, expected in tf_out.items():
        # same weights, same math; two GEMM libraries' float32 summation orders (measured: below 1e-6)
        np.testing.assert_allclose(np.asarray(jax_out[name]), np.asarray(expected), rtol=1e-5, atol=1e-5, err_msg=name)


def test_import_and_build_on_jax_without_tensorflow(outputs):
    """The child imported keras_vit and built a ViT (Ti/16's widths) on JAX without importing TensorFlow."""
    count, tf_imported = outputs[1]["probe"]
    assert int(count) > 0 and tf_imported is False
