"""Shared test helpers: tiny configurations, checkpoints in the original layout, round trips."""

import numpy as np

import keras

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def tiny_vit(**overrides):
    import keras_vit

    config = dict(TINY, num_classes=5)
    config.update(overrides)
    return keras_vit.ViT(**config)


def small_classifier():
    """A dense classifier of the tiny ViT's inputs and classes, its last layer named "head" as a ViT's: for the
    training tests whose subject (a callback, the optimizer's EMA, a resume) works the same on any Keras model; it
    traces its train step in a sixth of the tiny ViT's CPU time. The ViT's own training path is tested in the
    killed-and-resumed job runs (test_resume_settings, test_lora_training)."""
    return keras.Sequential([
        keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
        keras.layers.Dense(8, activation="gelu"), keras.layers.Dense(5, activation="softmax", name="head"),
    ])


def images(batch=2, size=32, seed=0):
    h, w = (size, size) if isinstance(size, int) else size
    return np.random.default_rng(seed).uniform(0, 255, (batch, h, w, 3)).astype("float32")


def vit_checkpoint(
    patch_size=8,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    mlp_dim=64,
    num_classes=5,
    grid=(4, 4),
    representation_size=None,
    class_token=True,
    naming="original",
    seed=0,
    scale=0.2,
):
    """Random arrays named and shaped as an original Google ViT ``.npz``."""
    rng = np.random.default_rng(seed)

    def r(*shape):
        return (rng.standard_normal(shape) * scale).astype("float32")

    d, hd = hidden_size, hidden_size // num_heads
    tokens = grid[0] * grid[1] + (1 if class_token else 0)
    p = {
        "embedding/kernel": r(patch_size, patch_size, 3, d),
        "embedding/bias": r(d),
        "Transformer/posembed_input/pos_embedding": r(1, tokens, d),
        "Transformer/encoder_norm/scale": 1 + r(d),
        "Transformer/encoder_norm/bias": r(d),
    }
    if class_token:
        p["cls"] = r(1, 1, d)
    ln0, ln1, att, mlp = (
        ("LayerNorm_0", "LayerNorm_2", "MultiHeadDotProductAttention_1", "MlpBlock_3")
        if naming == "original"
        else ("LayerNorm_0", "LayerNorm_1", "MultiHeadDotProductAttention_0", "MlpBlock_0")
    )
    for i in range(num_layers):
        b = f"Transformer/encoderblock_{i}"
        for ln in (ln0, ln1):
            p[f"{b}/{ln}/scale"] = 1 + r(d)
            p[f"{b}/{ln}/bias"] = r(d)
        for name in ("query", "key", "value"):
            p[f"{b}/{att}/{name}/kernel"] = r(d, num_heads, hd)
            p[f"{b}/{att}/{name}/bias"] = r(num_heads, hd)
        p[f"{b}/{att}/out/kernel"] = r(num_heads, hd, d)
        p[f"{b}/{att}/out/bias"] = r(d)
        p[f"{b}/{mlp}/Dense_0/kernel"] = r(d, mlp_dim)
        p[f"{b}/{mlp}/Dense_0/bias"] = r(mlp_dim)
        p[f"{b}/{mlp}/Dense_1/kernel"] = r(mlp_dim, d)
        p[f"{b}/{mlp}/Dense_1/bias"] = r(d)
    width = d
    if representation_size:
        p["pre_logits/kernel"] = r(d, representation_size)
        p["pre_logits/bias"] = r(representation_size)
        width = representation_size
    p["head/kernel"] = r(width, num_classes)
    p["head/bias"] = r(num_classes)
    if naming == "flax":
        p = {"params/" + k: v for k, v in p.items()}
    return p


def save_npz(path, arrays):
    np.savez(path, **arrays)
    return str(path)


def original_names(arrays):
    """Strip the Flax naming back to the original one (what the reference reads)."""
    from keras_vit.weights import canonical_key

    return {canonical_key(k): v for k, v in arrays.items()}


def run_layer_test(layer, inputs):
    """get_config/from_config round trip and equal outputs with copied weights."""
    outputs = layer(inputs)
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    clone(inputs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(clone(inputs)), np.asarray(outputs), atol=1e-6)
    assert clone.get_config() == config
    assert tuple(layer.compute_output_shape(tuple(inputs.shape))) == tuple(outputs.shape)
    return outputs


def run_saving_test(model, inputs, tmp_path, atol=1e-6):
    """Save as .keras, reload with safe_mode=True, compare outputs."""
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        np.asarray(loaded(inputs, training=False)), np.asarray(model(inputs, training=False)), atol=atol
    )
    return loaded


def run_fit_step_test(model, inputs, num_classes):
    """One fit step on a tf.data batch; every trainable weight gets a non-zero gradient."""
    import tensorflow as tf

    from keras_vit.train.resumable import build_optimizer_slots

    labels = np.arange(len(inputs)) % num_classes
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(len(inputs))
    # a zero-initialised head passes no gradient back on the first step; start it random
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.1, head.kernel.shape))
    x, y = next(iter(dataset))
    with tf.GradientTape() as tape:
        loss = keras.losses.sparse_categorical_crossentropy(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    for variable, grad in zip(model.trainable_variables, grads):
        assert grad is not None, f"no gradient for {variable.path}"
        assert np.any(np.asarray(grad) != 0), f"zero gradient for {variable.path}"
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    build_optimizer_slots(model)  # one trace of the step instead of two (keras_vit.train.resumable)
    history = model.fit(dataset, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def image_folder(root, classes=("cat", "dog"), per_class=5, size=(12, 10)):
    """``root/<class>/NNN.png``: ``per_class`` random RGB images of ``size`` (h, w) per class; returns ``root``."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, tuple(size) + (3,), dtype=np.uint8)).save(root / c / f"{i:03d}.png")
    return root


def randomized(model, std=0.2, seed=0):
    """``model`` with every weight drawn from N(0, ``std``): outputs that every weight moves; returns ``model``."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, std, variable.shape).astype("float32"))
    return model


def png_files(root, sizes, seed=1):
    """Paths of random RGB PNGs of ``sizes`` ``[(h, w), ...]`` written as ``root/HxW.png``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for h, w in sizes:
        paths.append(str(root / f"{h}x{w}.png"))
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(paths[-1])
    return paths


HF_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hf_snapshot(tmp_path, repo_id):
    """The snapshot folder of ``repo_id`` in a Hugging Face cache under ``tmp_path / "hf"`` (``refs/main`` names it)."""
    repo = tmp_path / "hf" / "hub" / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(HF_COMMIT)
    return repo / "snapshots" / HF_COMMIT


def offline_hf(monkeypatch, tmp_path):
    """This process reads the cache of :func:`hf_snapshot` with the Hub offline, as ``HF_HOME`` and
    ``HF_HUB_OFFLINE=1`` make it when set before ``huggingface_hub`` is imported (it reads them into its
    ``constants`` then, so those are set too). :func:`run_offline_hf` checks the variables themselves in a fresh
    process; this spares the other offline loads a TensorFlow start-up each."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def run_offline_hf(tmp_path, code):
    """The stdout lines of ``code`` run in a fresh Python with this repository on its path, ``HF_HOME`` the cache of
    :func:`hf_snapshot` and ``HF_HUB_OFFLINE=1`` (no network, as users configure it); it must exit 0."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def clip_like_vit():
    """CLIP-like: pre-norm, a projection to 8 values, no head; random weights so that the embedding is not flat."""
    model = tiny_vit(include_top=False, projection_dim=8, pre_norm=True, name="clip_like")
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(variable + rng.normal(size=variable.shape).astype("float32") * 0.2)
    return model
