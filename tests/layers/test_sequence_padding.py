"""Attention padded to what cuDNN's fused attention takes (issue 26, part 1) computes the unpadded attention.

The padded path is forced on CPU with ``attention_padding="always"`` and compared with ``"never"``: outputs and
gradients (with respect to the inputs and every weight) within float32 rounding, at 5, 17, 50 and 197 tokens,
on the TensorFlow backend here and on the JAX backend in a subprocess (where the path is
``jax.nn.dot_product_attention`` with ``key_value_seq_lengths``, as on the GPU). ``SEQUENCE_MULTIPLE`` is also
raised to 64 so that even token counts are padded (50 to 64, 197 to 256): many masked keys, not one.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras
import keras_vit
from keras_vit.layers import SelfAttention, sequence_padding
from tests.helpers import TINY

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENS = (5, 17, 50, 197)


def _close(actual, expected, what, scale=None):
    """Equal to float32 rounding, relative to ``scale`` (default: ``expected``'s largest value). The gradients
    are compared at the scale of the largest one: the key bias's is zero in exact arithmetic (softmax does not
    see a constant added to a row of scores), so both sides are rounding noise there."""
    scale = float(np.abs(expected).max()) if scale is None else scale
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-6 * max(scale, 1e-30), err_msg=what)


def _largest(arrays):
    return max(float(np.abs(a).max()) for a in arrays)


def _layer(mode, width=16, heads=4):
    keras.utils.set_random_seed(0)
    layer = SelfAttention(num_heads=heads, key_dim=width // heads, attention_padding=mode)
    layer.build((None, None, width))
    rng = np.random.default_rng(1)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") * 0.3 for w in layer.weights])
    return layer


def _value_and_grads(fn, x, variables):
    import tensorflow as tf

    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = fn(x)
        loss = tf.reduce_sum(tf.square(out) * tf.cos(tf.range(out.shape[-1], dtype="float32")))
    grads = tape.gradient(loss, [x] + list(variables))
    return np.asarray(out), [np.asarray(g) for g in grads]


@pytest.mark.parametrize("multiple", [2, 64])
@pytest.mark.parametrize("heads", [4, 2])  # head dim 4 (padded to 8 too) and 8
@pytest.mark.parametrize("tokens", TOKENS)
def test_padded_attention_equals_unpadded_with_gradients(tokens, heads, multiple, monkeypatch):
    monkeypatch.setattr(sequence_padding, "SEQUENCE_MULTIPLE", multiple)
    x = np.random.default_rng(tokens).normal(size=(2, tokens, 16)).astype("float32")
    plain, padded = _layer("never", heads=heads), _layer("always", heads=heads)
    out, grads = _value_and_grads(plain, x, plain.trainable_variables)
    padded_out, padded_grads = _value_and_grads(padded, x, padded.trainable_variables)
    _close(padded_out, out, f"output, {tokens} tokens")
    names = ["inputs"] + [v.path for v in plain.trainable_variables]
    assert len(padded_grads) == len(grads) == 9
    for name, g, expected in zip(names, padded_grads, grads):
        _close(g, expected, f"gradient of {name}, {tokens} tokens", _largest(grads))


def test_the_padded_path_is_the_one_taken(monkeypatch):
    shapes = []
    attend = sequence_padding._attend
    monkeypatch.setattr(sequence_padding, "_attend", lambda q, *a: shapes.append(tuple(q.shape)) or attend(q, *a))
    x = np.zeros((2, 17, 16), "float32")
    _layer("always")(x)
    assert shapes == [(2, 18, 4, 8)]  # 17 tokens padded to 18, head dim 4 to 8
    _layer("never")(x)
    _layer("always")(x, return_attention_scores=True)  # the weights are asked for: the explicit path, unpadded
    assert len(shapes) == 1


def test_auto_keeps_todays_computation_on_cpu(monkeypatch):
    # the default: nothing padded without a CUDA GPU (here: TensorFlow, CPU), so the original checkpoints'
    # numerics on CPU are those of the unpadded path
    for dtype in ("float32", "bfloat16"):
        assert sequence_padding.plan("auto", 197, 64, dtype, fused=True) is None
    monkeypatch.setattr(sequence_padding, "_attend", lambda *a: pytest.fail("padded under auto on CPU"))
    model = keras_vit.ViT(**TINY, num_classes=3)
    model(np.zeros((1, 32, 32, 3), "float32"))


def test_auto_pads_only_where_cudnn_runs(monkeypatch):
    # a pretend H100 on the JAX backend: the decision alone (the kernel itself needs the GPU)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    monkeypatch.setattr(sequence_padding, "_cuda_capability", lambda: (9, 0))
    padding = sequence_padding.plan("auto", 197, 64, "bfloat16", fused=True)
    assert (padding.padded_tokens, padding.padded_head_dim, padding.implementations) == (198, 64, ("cudnn", "xla"))
    assert sequence_padding.plan("auto", 196, 64, "bfloat16", fused=True) is None  # cuDNN takes it as it is
    assert sequence_padding.plan("auto", 197, 64, "float32", fused=True) is None  # cuDNN takes 16-bit only
    assert sequence_padding.plan("auto", 197, 264, "bfloat16", fused=True) is None  # head dim over 256
    assert sequence_padding.plan("auto", 197, 64, "bfloat16", fused=False) is None  # weights or dropout asked
    assert sequence_padding.plan("never", 197, 64, "bfloat16", fused=True) is None
    monkeypatch.setattr(sequence_padding, "_cuda_capability", lambda: (8, 0))
    assert sequence_padding.plan("auto", 197, 160, "bfloat16", fused=True) is None  # over 128 before Hopper
    monkeypatch.setattr(sequence_padding, "_cuda_capability", lambda: (7, 5))
    assert sequence_padding.plan("auto", 197, 64, "bfloat16", fused=True) is None  # before Ampere: no kernel


def test_bad_mode_names_the_value():
    with pytest.raises(ValueError, match=r"attention_padding.*'sometimes'"):
        SelfAttention(num_heads=2, key_dim=8, attention_padding="sometimes")
    with pytest.raises(ValueError, match=r"attention_padding.*True"):
        with sequence_padding.attention_padding(True):
            pass
    assert sequence_padding.default_mode() == "auto"
    with pytest.raises(ValueError, match=r"attention_padding.*'on'"):
        sequence_padding.set_default_mode("on")
    previous = sequence_padding.set_default_mode("never")  # for the rest of the process, until set again
    try:
        assert (previous, sequence_padding.default_mode()) == ("auto", "never")
    finally:
        sequence_padding.set_default_mode(previous)


def test_config_keeps_the_default_out_and_round_trips_a_choice():
    plain = SelfAttention(num_heads=2, key_dim=8)
    assert "attention_padding" not in plain.get_config()  # the configs of .keras files are unchanged
    assert SelfAttention.from_config(plain.get_config()).attention_padding == "auto"
    forced = SelfAttention(num_heads=2, key_dim=8, attention_padding="always")
    assert SelfAttention.from_config(forced.get_config()).attention_padding == "always"


def _family():
    # the builders of the family that run SelfAttention: class token (17 tokens), registers (21), MAP pooling
    # (16 patches; its AttentionPooling head is one query's explicit attention, which needs no padding)
    return {
        "token": lambda: keras_vit.ViT(**TINY, num_classes=3, classifier_activation=None),
        "registers": lambda: keras_vit.ViT(**TINY, num_classes=3, num_register_tokens=4,
                                           classifier_activation=None),
        "map": lambda: keras_vit.ViT(**TINY, num_classes=3, pooling="map", class_token=False,
                                     classifier_activation=None),
    }


@pytest.mark.parametrize("name", ["token", "registers", "map"])
def test_family_padded_equals_unpadded(name, monkeypatch):
    monkeypatch.setattr(sequence_padding, "SEQUENCE_MULTIPLE", 8)  # 17 -> 24, 21 -> 24, 16 stays: masked anyway
    keras.utils.set_random_seed(0)
    model = _family()[name]()
    rng = np.random.default_rng(1)
    for w in model.weights:  # a non-zero head, so the gradients say something
        w.assign(np.asarray(w) + 0.05 * rng.normal(size=w.shape).astype("float32"))
    x = np.random.default_rng(2).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    results = {}
    for mode in ("never", "always"):
        with sequence_padding.attention_padding(mode):
            results[mode] = _value_and_grads(lambda t: model(t, training=True), x, model.trainable_variables)
    _close(results["always"][0], results["never"][0], f"{name} output")
    for v, g, expected in zip(["inputs"] + [v.path for v in model.trainable_variables], results["always"][1],
                              results["never"][1]):
        _close(g, expected, f"{name}: gradient of {v}", _largest(results["never"][1]))


_JAX = r"""
import json, sys
import numpy as np
import jax, jax.numpy as jnp
import keras, keras_vit
from keras_vit.layers import SelfAttention, sequence_padding

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)  # one compile each
out = {"backend": keras.backend.backend(), "device": jax.devices()[0].platform, "layers": {}, "models": {}}
# the default on this CPU: nothing padded, whatever the dtype
out["auto_plans"] = [repr(sequence_padding.plan("auto", 197, 64, d, fused=True)) for d in ("float32", "bfloat16")]

def value_and_grads(model, tv, ntv, x, **kw):
    def loss(tv, x):
        y = model.stateless_call(tv, ntv, x, **kw)[0]
        return jnp.sum(jnp.square(y) * jnp.cos(jnp.arange(y.shape[-1], dtype="float32"))), y
    (_, y), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(tv, x)
    return [np.asarray(y)] + [np.asarray(g) for g in jax.tree_util.tree_leaves(grads)]

def rel_diffs(a, b):
    # the output relative to its largest value, the gradients to the largest gradient (see _close)
    grads = max(float(np.abs(q).max()) for q in b[1:])
    scales = [max(float(np.abs(b[0]).max()), 1e-30)] + [max(grads, 1e-30)] * (len(b) - 1)
    return [float(np.abs(p - q).max()) / s for p, q, s in zip(a, b, scales)]

# every count once at the default multiple (50 is even: the mask of no padding), two with many padded keys
for tokens, multiple in ((5, 2), (17, 2), (50, 2), (197, 2), (50, 64), (197, 64)):
        sequence_padding.SEQUENCE_MULTIPLE = multiple
        x = jnp.asarray(np.random.default_rng(tokens).normal(size=(2, tokens, 16)), "float32")
        results = []
        for mode in ("never", "always"):
            keras.utils.set_random_seed(0)
            layer = SelfAttention(num_heads=4, key_dim=4, attention_padding=mode)
            layer.build((None, None, 16))
            rng = np.random.default_rng(1)
            layer.set_weights([rng.normal(size=w.shape).astype("float32") * 0.3 for w in layer.weights])
            results.append(value_and_grads(layer, [v.value for v in layer.trainable_variables], [], x))
        out["layers"][f"{tokens}/{multiple}"] = rel_diffs(results[1], results[0])

sequence_padding.SEQUENCE_MULTIPLE = 8
builds = {
    "token": lambda: keras_vit.ViT(**TINY, num_classes=3, classifier_activation=None),
    "registers": lambda: keras_vit.ViT(**TINY, num_classes=3, num_register_tokens=4, classifier_activation=None),
    "map": lambda: keras_vit.ViT(**TINY, num_classes=3, pooling="map", class_token=False, classifier_activation=None),
}
x = jnp.asarray(np.random.default_rng(2).uniform(0, 255, (2, 32, 32, 3)), "float32")
for name, build in builds.items():
    keras.utils.set_random_seed(0)
    model = build()
    rng = np.random.default_rng(1)
    for w in model.weights:
        w.assign(np.asarray(w) + 0.05 * rng.normal(size=w.shape).astype("float32"))
    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]
    results = []
    for mode in ("never", "always"):
        with sequence_padding.attention_padding(mode):  # chosen while jax.jit traces
            results.append(value_and_grads(model, tv, ntv, x, training=True))
    out["models"][name] = rel_diffs(results[1], results[0])
print(json.dumps(out))
"""


@pytest.mark.slow  # make test-slow: over 9 s on 2 cores; the same path is tested fast elsewhere
def test_padded_attention_on_jax_equals_unpadded_with_gradients():
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _JAX], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["backend"], out["device"]) == ("jax", "cpu")
    assert out["auto_plans"] == ["None", "None"]
    assert set(out["layers"]) == {f"{t}/2" for t in TOKENS} | {"50/64", "197/64"}
    for where, diffs in list(out["layers"].items()) + list(out["models"].items()):
        assert len(diffs) > 1, where  # the output and every gradient
        # float32 rounding, relative to each tensor's largest value (measured: below 1e-6)
        assert max(diffs) < 1e-5, (where, diffs)
    assert set(out["models"]) == {"token", "registers", "map"}


@pytest.mark.parametrize("kind", ["axial", "mixed", "dinov3"])
def test_padded_attention_with_rope_equals_unpadded(kind):
    """RoPE rotates the queries and keys before the padding (the JAX + CUDA path), as in the explicit one."""
    rope = {"kind": kind, "grid": (3, 5), "num_prefix_tokens": 2}
    plain = SelfAttention(num_heads=2, key_dim=8, attention_padding="never", rope=rope)
    padded = SelfAttention(num_heads=2, key_dim=8, attention_padding="always", rope=rope)
    x = np.random.default_rng(0).normal(size=(2, 17, 16)).astype("float32")
    plain(x)
    padded(x)
    padded.set_weights(plain.get_weights())
    _close(np.asarray(padded(x)), np.asarray(plain(x)), f"{kind} RoPE output")
