"""GPU benchmark: keras_vit on Keras 3's JAX backend (mixed bfloat16, XLA) against timm (AMP, torch.compile).

Issue 16, part 2. Each row is one model at one batch size: inference throughput and a training step
(forward + backward + AdamW update), images/s, and the GPU's peak memory. Every (framework, model, mode)
runs in its own subprocess, one after the other on the same GPU, inside one invocation of this script, so
the keras_vit / timm ratios come from the same run. (Calls 1 and 2 below ran this file before
``--attention``, ``--torch-mode`` and ``--mem-fraction`` were added; the measuring code is unchanged.)

keras_vit (``--frameworks keras``): ``KERAS_BACKEND=jax``,
``keras.mixed_precision.set_global_policy("mixed_bfloat16")``, the model built by ``keras_vit.ViTS16``
etc. with ``classifier_activation=None`` (logits, as timm returns), its weights as JAX arrays, and one
``jax.jit`` of a stateless function compiled ahead of time (``.lower(...).compile()``):

* inference: ``model.stateless_call(trainable, non_trainable, x, training=False)``;
* training: ``jax.value_and_grad`` of the mean sparse categorical cross-entropy of ``stateless_call``
  (``training=True``), then ``keras.optimizers.AdamW.stateless_apply``, all in one jitted step with the
  weights, the optimizer state and the non-trainable state donated (``donate_argnums``).

This is the fastest way Keras offers to run a model on JAX (``model.predict_on_batch`` /
``train_on_batch`` add Keras' state synchronisation on top of the same jitted function).

timm (``--frameworks timm``): ``timm.create_model(NAME, pretrained=False)``, channels first (NCHW),
``torch.compile(model)`` (default mode, static shapes: ``torch._dynamo.config.automatic_dynamic_shapes
= False``), ``torch.autocast("cuda", torch.bfloat16)``, ``torch.set_float32_matmul_precision("high")``;
inference under ``torch.inference_mode()``; training ``F.cross_entropy`` + ``backward`` +
``torch.optim.AdamW(fused=True)`` + ``zero_grad(set_to_none=True)``.

Inputs: float32 images on the GPU (keras_vit NHWC in [0, 255], its model rescales them; timm NCHW),
random labels of 1000 classes, made once per batch size: no host transfer is timed. Timing: the first
call (``compile_s``: time to the first result, compilation included), two more warm-up calls, one call
to size the repeats, then ``--repeats`` timed repeats of ``n`` calls (``n`` so that a repeat lasts ``--min-time`` seconds)
each ended by ``jax.block_until_ready`` / ``torch.cuda.synchronize``; ``images_per_second`` is the
median repeat, every repeat is kept in ``repeats_images_per_second``.

Peak memory: timm ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` before each
batch size (exact per row). JAX has no reset: ``peak_bytes_in_use`` of the process
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``) is read after each batch size, batch sizes run in ascending
order, so it is the peak of the rows up to that one; ``xla_memory_analysis_mb`` is the compiled
executable's own arguments + outputs + temporaries (XLA's estimate of that row alone). The
``--memory-test`` rows (ViT-L/16 training at batch 64) each run in a fresh process, so both peaks are
exact there.

Commands used for ``benchmarks/results/gpu-h100.json`` (one NVIDIA H100 80GB HBM3, no network: keras
3.15.1, namex and optree carried as wheels in ``.whl/``, the package snapshot ``git archive HEAD keras_vit``
and this file in ``.gpu/``; the machine's own python3 with torch 2.11, timm, jax 0.11.2)::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD/.gpu
    # call 1 and call 2 (same machine)
    python3 .gpu/gpu_jax.py --sanity --env --models S/16,B/16 --deadline 545 --out $OUT/part1.json
    python3 .gpu/gpu_jax.py --models L/16 --memory-test L/16:64 --deadline 560 --out $OUT/part2.json
    # call 3 (another H100 machine): the variants
    python3 .gpu/gpu_jax.py --models S/16 --modes train --train-batch-sizes 128 --frameworks keras \
        --attention cudnn-padded --deadline 70 --out $OUT/p3_fix_s16.json
    python3 .gpu/gpu_jax.py --models L/16 --modes train --train-batch-sizes 64 --frameworks keras \
        --attention cudnn-padded --deadline 85 --out $OUT/p3_fix_l16_64.json
    python3 .gpu/gpu_jax.py --models L/16 --modes train --train-batch-sizes 128 --frameworks keras \
        --mem-fraction 0.95 --deadline 85 --out $OUT/p3_l16_128.json
    python3 .gpu/gpu_jax.py --models B/16 --modes infer --batch-sizes 1,32 --frameworks timm \
        --torch-mode reduce-overhead --deadline 75 --out $OUT/p3_timm_ro.json

(``.gpu/`` holds ``git archive HEAD keras_vit`` and this file; from a checkout with keras, JAX with CUDA,
torch and timm installed: ``python benchmarks/gpu_jax.py --sanity --env --out gpu.json``.)
``--tiny`` runs a 2-layer model at 32x32 on whatever device is there (CPU included): a check of the
script, not a GPU figure.

Since issue 26 (part 1) keras_vit's ``SelfAttention`` pads 197 tokens to 198 itself on a CUDA GPU in bfloat16
(``keras_vit.layers.sequence_padding``), so the ``default`` rows of a new run have cuDNN attention in training;
``--attention unpadded`` is the package before it, ``cudnn-padded`` the earlier patch (with the package's padding
off). Also added there: ``--modes predict,fit`` (``model.predict`` / ``model.fit`` on uint8 NumPy arrays with
``steps_per_execution``: ``gpu_fit.py``, which travels beside this file), ``--frameworks kerashub`` (keras-hub's
``ViTBackbone`` + the same head, skipped with the import error where keras-hub is absent), ``--dump DIR`` (XLA's
HLO and buffer assignment, inductor's graphs) and ``--profile DIR`` (``jax.profiler`` / ``torch.profiler`` traces).
The commands for the next GPU session are in ``docs/performance.md`` (GPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = {
    # name: (keras_vit builder, timm name, (hidden, layers, heads, mlp))
    "S/16": ("ViTS16", "vit_small_patch16_224", (384, 12, 6, 1536)),
    "B/16": ("ViTB16", "vit_base_patch16_224", (768, 12, 12, 3072)),
    "L/16": ("ViTL16", "vit_large_patch16_224", (1024, 24, 16, 4096)),
    "tiny": (None, None, (64, 2, 2, 128)),
}
NUM_CLASSES = 1000
MB = 1024.0 * 1024.0


def image_size(model):
    return 32 if model == "tiny" else 224


# --------------------------------------------------------------------------- timing


def measure(step, block, batch, repeats, min_time):
    """Compile (first call), warm up, then ``repeats`` timed repeats; returns a dict of figures."""
    t = time.perf_counter()
    block(step())
    compile_s = time.perf_counter() - t
    for _ in range(2):
        block(step())
    t = time.perf_counter()
    block(step())
    one = time.perf_counter() - t
    n = max(2, min(1000, math.ceil(min_time / max(one, 1e-6))))
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = None
        for _ in range(n):
            out = step()
        block(out)
        rates.append(n * batch / (time.perf_counter() - t))
    median = statistics.median(rates)
    return {
        "images_per_second": median,
        "latency_ms": 1000.0 * batch / median,
        "repeats_images_per_second": rates,
        "calls_per_repeat": n,
        "compile_s": compile_s,
    }


def profile_steps(spec, step, block, batch):
    """``--profile DIR``: five more calls of ``step`` under the framework's profiler, into
    ``DIR/<framework>-<model>-<mode>-b<batch>`` (``jax.profiler.trace``: TensorBoard's profile plugin or Perfetto;
    ``torch.profiler``: a Chrome trace, ``trace.json``). Returns the folder, or None without ``--profile``."""
    if not spec.get("profile"):
        return None
    folder = os.path.join(spec["profile"], f"{spec['worker']}-{spec['model'].replace('/', '')}-{spec['mode']}-b{batch}")
    os.makedirs(folder, exist_ok=True)
    if spec["worker"] == "timm":
        import torch

        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(5):
                block(step())
        prof.export_chrome_trace(os.path.join(folder, "trace.json"))
    else:
        import jax

        with jax.profiler.trace(folder):
            for _ in range(5):
                block(step())
    return folder


# --------------------------------------------------------------------------- keras_vit on JAX


def build_keras_model(spec):
    """(model, versions): keras_vit's model (worker ``keras``) or keras-hub's ViT with the same head (``kerashub``)."""
    import keras

    import keras_vit

    model_name = spec["model"]
    size = image_size(model_name)
    patch = 8 if model_name == "tiny" else 16
    if spec["worker"] == "kerashub":
        import gpu_fit

        return gpu_fit.kerashub_model(MODELS[model_name][2], size, patch, NUM_CLASSES)
    versions = f"keras {keras.__version__}"
    if model_name == "tiny":
        hidden, layers, heads, mlp = MODELS["tiny"][2]
        return keras_vit.ViT(image_size=size, patch_size=patch, hidden_size=hidden, num_layers=layers,
                             num_heads=heads, mlp_dim=mlp, num_classes=NUM_CLASSES,
                             classifier_activation=None), versions
    return getattr(keras_vit, MODELS[model_name][0])(num_classes=NUM_CLASSES, classifier_activation=None), versions


def keras_worker(spec, emit):
    """keras_vit (worker ``keras``) or keras-hub (``kerashub``): the jitted step (modes ``infer``, ``train``) or the
    plain Keras calls (``predict``, ``fit``: ``gpu_fit.py``)."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import jax.numpy as jnp
    import keras

    keras.mixed_precision.set_global_policy(spec["precision"])
    attention_check = install_attention(spec.get("attention", "default")) if spec["worker"] == "keras" else None
    model_name = spec["model"]
    size = image_size(model_name)
    try:
        model, versions = build_keras_model(spec)
    except ImportError as error:
        for batch in spec["batch_sizes"]:
            emit({"batch_size": batch, "skipped": f"keras-hub is not importable here: {error!r}"})
        return
    device = jax.devices()[0]
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    key = jax.random.PRNGKey(0)

    def peak_mb():
        stats = device.memory_stats() or {}
        return stats.get("peak_bytes_in_use", float("nan")) / MB

    def analysis(compiled):
        try:
            m = compiled.memory_analysis()
            total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
            return total / MB, m.temp_size_in_bytes / MB
        except Exception:  # noqa: BLE001 - not every backend reports it
            return None, None

    def fused_attention_calls(compiled):
        try:
            text = compiled.as_text()
        except Exception:  # noqa: BLE001
            return None
        return text.count("__cudnn$fmha")

    if spec["mode"] in ("fit", "predict"):
        import gpu_fit

        def emit_calls(record):
            emit(dict(record, versions=versions, attention_check=attention_check))

        gpu_fit.calls_worker(spec, emit_calls, model, size, NUM_CLASSES, peak_mb)
        return

    if spec["mode"] == "infer":

        def forward(tv, ntv, x):
            return model.stateless_call(tv, ntv, x, training=False)[0]

        for batch in spec["batch_sizes"]:
            x = jax.random.uniform(key, (batch, size, size, 3), minval=0.0, maxval=255.0)
            t = time.perf_counter()
            compiled = jax.jit(forward).lower(trainable, non_trainable, x).compile()
            xla_compile_s = time.perf_counter() - t
            figures = measure(lambda: compiled(trainable, non_trainable, x), jax.block_until_ready, batch,
                              spec["repeats"], spec["min_time"])
            figures["compile_s"] += xla_compile_s
            figures["profile"] = profile_steps(spec, lambda: compiled(trainable, non_trainable, x),
                                               jax.block_until_ready, batch)
            logits = compiled(trainable, non_trainable, x)
            total, temp = analysis(compiled)
            emit(dict(figures, batch_size=batch, xla_compile_s=xla_compile_s, peak_memory_mb=peak_mb(),
                      peak_memory_scope="process, batch sizes ascending", xla_memory_analysis_mb=total,
                      xla_temp_mb=temp, cudnn_fused_attention_calls=fused_attention_calls(compiled),
                      finite=bool(jnp.isfinite(logits.astype("float32")).all()), output_dtype=str(logits.dtype),
                      attention_check=attention_check, versions=versions))
        return

    optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05)
    optimizer.build(model.trainable_variables)
    optimizer_state = [v.value for v in optimizer.variables]

    def loss_fn(tv, ntv, x, y):
        logits, ntv = model.stateless_call(tv, ntv, x, training=True)
        loss = keras.losses.sparse_categorical_crossentropy(y, logits.astype("float32"), from_logits=True)
        return jnp.mean(loss), ntv

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def train_step(tv, ntv, ov, x, y):
        (loss, ntv), grads = grad_fn(tv, ntv, x, y)
        tv, ov = optimizer.stateless_apply(ov, grads, tv)
        return loss, tv, ntv, ov

    jitted = jax.jit(train_step, donate_argnums=(0, 1, 2))
    for batch in spec["batch_sizes"]:
        x = jax.random.uniform(key, (batch, size, size, 3), minval=0.0, maxval=255.0)
        y = jax.random.randint(key, (batch,), 0, NUM_CLASSES)
        state = jax.tree_util.tree_map(lambda a: a.copy(), (trainable, non_trainable, optimizer_state))
        t = time.perf_counter()
        compiled = jitted.lower(*state, x, y).compile()
        xla_compile_s = time.perf_counter() - t
        losses = []

        def step():
            nonlocal state
            loss, tv, ntv, ov = compiled(*state, x, y)
            state = (tv, ntv, ov)
            return loss

        t = time.perf_counter()
        losses.append(float(step()))
        first_call_s = time.perf_counter() - t
        figures = measure(step, jax.block_until_ready, batch, spec["repeats"], spec["min_time"])
        figures["compile_s"] = xla_compile_s + first_call_s
        figures["profile"] = profile_steps(spec, step, jax.block_until_ready, batch)
        last = float(step())
        total, temp = analysis(compiled)
        emit(dict(figures, batch_size=batch, xla_compile_s=xla_compile_s, peak_memory_mb=peak_mb(),
                  peak_memory_scope="process, batch sizes ascending" if len(spec["batch_sizes"]) > 1 else "process",
                  xla_memory_analysis_mb=total, xla_temp_mb=temp,
                  cudnn_fused_attention_calls=fused_attention_calls(compiled),
                  first_loss=losses[0], last_loss=last, finite=math.isfinite(last), attention_check=attention_check,
                  versions=versions))
        del state, compiled


def install_attention(variant):
    """keras_vit's attention for this worker process, by ``--attention``:

    * ``default``: the package as it is: ``SelfAttention``'s ``attention_padding="auto"`` pads the tokens to an even
      count on a CUDA GPU in bfloat16 so that cuDNN's fused attention runs in training too
      (``keras_vit.layers.sequence_padding``);
    * ``unpadded`` / ``always``: the same with ``attention_padding("never")`` (the package before the padding: the
      training step falls back to XLA's attention at 197 tokens) or ``("always")`` (padded on any device);
    * ``cudnn-padded``: the benchmark-side patch the padding replaced, kept to reproduce call 3 (below).

    ``cudnn-padded``: route ``keras.ops.dot_product_attention`` (what ``SelfAttention`` calls on
    JAX) through cuDNN flash attention with the tokens padded to an even count and masked by length.

    Why: jax 0.11.2's cuDNN attention, when differentiated, checks ``T % 2 == 0`` as if a bias were given
    (its fwd rule passes ``bias is not None`` after ``bias`` became a placeholder), so at ViT's 197 tokens
    the training graph falls back to XLA attention (Keras catches the error and logs it). Inference, which
    takes the non-differentiated path, does use cuDNN. Returns a check of the patched against the
    original function on random inputs, or None for the default.
    """
    if variant == "default":
        return None
    from keras_vit.layers import sequence_padding

    if variant in ("unpadded", "always"):
        # for the whole worker process: every trace below sees it
        sequence_padding.set_default_mode("never" if variant == "unpadded" else "always")
        return {"variant": variant, "attention_padding": sequence_padding.default_mode()}
    # the package's own padding off, so that this patch is what runs (as in call 3, before the package padded)
    sequence_padding.set_default_mode("never")
    import jax
    import jax.numpy as jnp
    import keras
    import numpy as np

    original = keras.ops.dot_product_attention

    def padded(query, key, value, bias=None, mask=None, scale=None, is_causal=False, flash_attention=None,
               attn_logits_soft_cap=None):
        tokens = query.shape[1]
        if bias is not None or mask is not None or is_causal or attn_logits_soft_cap is not None or tokens % 2 == 0:
            return original(query, key, value, bias=bias, mask=mask, scale=scale, is_causal=is_causal,
                            flash_attention=flash_attention, attn_logits_soft_cap=attn_logits_soft_cap)
        pad = ((0, 0), (0, 1), (0, 0), (0, 0))
        q, k, v = (jnp.pad(t, pad) for t in (query, key, value))
        lengths = jnp.full((query.shape[0],), tokens, dtype=jnp.int32)
        implementation = "cudnn" if jax.default_backend() == "gpu" else "xla"
        out = jax.nn.dot_product_attention(q, k, v, scale=scale, query_seq_lengths=lengths,
                                           key_value_seq_lengths=lengths, implementation=implementation)
        return out[:, :tokens]

    keras.ops.dot_product_attention = padded
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 197, 4, 64)), dtype="bfloat16") for _ in range(3))
    a = np.asarray(padded(q, k, v, scale=0.125).astype("float32"))
    b = np.asarray(original(q, k, v, scale=0.125, flash_attention=False).astype("float32"))

    def loss(fn, q):
        return jnp.sum(fn(q, k, v, scale=0.125).astype("float32") ** 2)

    ga = np.asarray(jax.grad(lambda q: loss(padded, q))(q).astype("float32"))
    gb = np.asarray(jax.grad(lambda q: loss(lambda *t, **kw: original(*t, flash_attention=False, **kw), q))(q)
                    .astype("float32"))
    return {"variant": variant, "forward_max_abs_diff_vs_xla": float(np.abs(a - b).max()),
            "forward_abs_max": float(np.abs(b).max()), "grad_max_abs_diff_vs_xla": float(np.abs(ga - gb).max()),
            "grad_abs_max": float(np.abs(gb).max())}


# --------------------------------------------------------------------------- timm on torch


def timm_worker(spec, emit):
    import torch
    import torch.nn.functional as F
    import timm

    torch._dynamo.config.automatic_dynamic_shapes = False
    torch.set_float32_matmul_precision("high")
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    model_name = spec["model"]
    size = image_size(model_name)
    if model_name == "tiny":
        from timm.models.vision_transformer import VisionTransformer

        hidden, layers, heads, mlp = MODELS["tiny"][2]
        model = VisionTransformer(img_size=size, patch_size=8, embed_dim=hidden, depth=layers, num_heads=heads,
                                  mlp_ratio=mlp / hidden, num_classes=NUM_CLASSES)
    else:
        model = timm.create_model(MODELS[model_name][1], pretrained=False, num_classes=NUM_CLASSES)
    model = model.to(dev)
    amp_dtype = torch.bfloat16

    def block(_):
        if cuda:
            torch.cuda.synchronize()

    def peak_mb():
        return torch.cuda.max_memory_allocated() / MB if cuda else float("nan")

    if spec["mode"] == "infer":
        model.eval()
        compiled = torch.compile(model, mode=spec.get("torch_mode") or None)
        for batch in spec["batch_sizes"]:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            x = torch.randn(batch, 3, size, size, device=dev)

            def step():
                with torch.inference_mode(), torch.autocast(dev.type, dtype=amp_dtype):
                    return compiled(x)

            figures = measure(step, block, batch, spec["repeats"], spec["min_time"])
            figures["profile"] = profile_steps(spec, step, block, batch)
            out = step()
            emit(dict(figures, batch_size=batch, peak_memory_mb=peak_mb(), peak_memory_scope="this row",
                      finite=bool(torch.isfinite(out.float()).all()), output_dtype=str(out.dtype)))
        return

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=cuda)
    compiled = torch.compile(model, mode=spec.get("torch_mode") or None)
    for batch in spec["batch_sizes"]:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        x = torch.randn(batch, 3, size, size, device=dev)
        y = torch.randint(0, NUM_CLASSES, (batch,), device=dev)

        def step():
            with torch.autocast(dev.type, dtype=amp_dtype):
                loss = F.cross_entropy(compiled(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()

        t = time.perf_counter()
        first = float(step())
        first_call_s = time.perf_counter() - t
        figures = measure(step, block, batch, spec["repeats"], spec["min_time"])
        figures["compile_s"] = first_call_s
        figures["profile"] = profile_steps(spec, step, block, batch)
        last = float(step())
        emit(dict(figures, batch_size=batch, peak_memory_mb=peak_mb(), peak_memory_scope="this row",
                  first_loss=first, last_loss=last, finite=math.isfinite(last)))


# --------------------------------------------------------------------------- sanity and environment


def sanity_worker(spec, emit):
    """GPU used, fused attention taken, fused == explicit attention, deterministic finite outputs."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import jax.numpy as jnp
    import numpy as np
    import keras

    import keras_vit
    from keras.src.backend.jax import nn as jax_nn

    result = {"jax_devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()],
              "default_backend": jax.default_backend()}
    for policy in ("float32", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        model = keras_vit.ViT(image_size=64, patch_size=16, hidden_size=128, num_layers=2, num_heads=2,
                              mlp_dim=256, num_classes=10, classifier_activation=None)
        # the head is zero-initialised: give it weights so the logits say something
        head = model.get_layer("head")
        head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32") * 0.02)
        x = jax.random.uniform(jax.random.PRNGKey(1), (4, 64, 64, 3), minval=0.0, maxval=255.0)
        tv = [v.value for v in model.trainable_variables]
        ntv = [v.value for v in model.non_trainable_variables]
        fwd = jax.jit(lambda tv, ntv, x: model.stateless_call(tv, ntv, x, training=False)[0])
        a = np.asarray(fwd(tv, ntv, x).astype("float32"))
        b = np.asarray(fwd(tv, ntv, x).astype("float32"))
        eager = np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(model(x, training=False), "float32")))
        block = model.get_layer("transformer_block_0")
        attention = [l for l in block._flatten_layers() if isinstance(l, keras_vit.layers.SelfAttention)][0]
        tokens = jax.random.normal(jax.random.PRNGKey(2), (4, 17, 128))
        fused = np.asarray(keras.ops.cast(attention(tokens), "float32"))
        explicit = np.asarray(keras.ops.cast(attention(tokens, return_attention_scores=True)[0], "float32"))
        q = jnp.zeros((4, 197, 6, 64), dtype="bfloat16" if policy != "float32" else "float32")
        result[policy] = {
            "logits_finite": bool(np.isfinite(a).all()),
            "jit_twice_max_abs_diff": float(np.abs(a - b).max()),
            "jit_vs_eager_max_abs_diff": float(np.abs(a - eager).max()),
            "logits_abs_max": float(np.abs(a).max()),
            "fused_vs_explicit_attention_max_abs_diff": float(np.abs(fused - explicit).max()),
            "explicit_attention_abs_max": float(np.abs(explicit).max()),
            "keras_picks_flash_attention_for_B197_H6_D64": bool(jax_nn._can_use_flash_attention(q, q, q, None)),
        }
    emit(result)


def env_worker(spec, emit):
    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
        info["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60).stdout.splitlines()
        info["nvidia_smi_header"] = [line for line in head if "CUDA Version" in line]
    except Exception as error:  # noqa: BLE001
        info["nvidia_smi"] = f"failed: {error!r}"
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = names[0] if names else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    info["cpu_count"] = os.cpu_count()
    try:
        import torch
        import timm

        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cudnn_torch=torch.backends.cudnn.version(),
                    timm=timm.__version__, torch_gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(gpu_memory_mb=p.total_memory / MB, multiprocessors=p.multi_processor_count,
                        compute_capability=f"{p.major}.{p.minor}")
    except Exception as error:  # noqa: BLE001
        info["torch_error"] = repr(error)
    emit(info)


def env_jax_worker(spec, emit):
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import jaxlib
    import keras
    import numpy

    info = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "keras": keras.__version__,
            "numpy": numpy.__version__, "keras_backend": keras.backend.backend(),
            "jax_devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()]}
    try:
        from jax._src.lib import cuda_versions

        info["cudnn_jax"] = cuda_versions.cudnn_get_version() if cuda_versions else None
        info["cuda_runtime_jax"] = cuda_versions.cuda_runtime_get_version() if cuda_versions else None
    except Exception as error:  # noqa: BLE001
        info["cudnn_jax"] = repr(error)
    emit(info)


WORKERS = {"keras": keras_worker, "kerashub": keras_worker, "timm": timm_worker, "sanity": sanity_worker, "env": env_worker,
           "env_jax": env_jax_worker}


def worker_main(spec_json):
    spec = json.loads(spec_json)
    path = spec["records"]

    def emit(record):
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")

    WORKERS[spec["worker"]](spec, emit)


# --------------------------------------------------------------------------- driver


def run_worker(spec, timeout, mem_fraction="", dump=""):
    """Run one worker in its own process; returns (records, error or None, seconds).

    ``dump`` (``--dump DIR``): the compilers' graphs of this worker into ``DIR/<worker>-<model>-<mode>``: XLA's HLO
    before and after optimisation with its buffer assignment and memory-usage report (``XLA_FLAGS=--xla_dump_to=...
    --xla_dump_hlo_as_text``), or inductor's FX graphs and generated kernels (``TORCH_COMPILE_DEBUG=1``, under
    ``torch_compile_debug/`` of that folder)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        path = f.name
    spec = dict(spec, records=path)
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", KERAS_BACKEND="jax",
               TF_CPP_MIN_LOG_LEVEL="2")
    if mem_fraction:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = mem_fraction
    cwd = None
    if dump and spec["worker"] in ("keras", "kerashub", "timm"):
        cwd = os.path.abspath(os.path.join(dump, f"{spec['worker']}-{spec['model'].replace('/', '')}-{spec['mode']}"))
        os.makedirs(cwd, exist_ok=True)
        if spec["worker"] == "timm":
            env["TORCH_COMPILE_DEBUG"] = "1"
        else:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={cwd} --xla_dump_hlo_as_text").strip()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    t = time.perf_counter()
    error = None
    try:
        proc = subprocess.run(cmd, env=env, timeout=max(timeout, 1), capture_output=True, text=True, cwd=cwd)
        if proc.returncode != 0:
            error = f"exit {proc.returncode}: " + proc.stderr[-3000:]
        elif proc.stderr.strip():
            sys.stderr.write(proc.stderr[-2000:])
    except subprocess.TimeoutExpired as expired:
        tail = expired.stderr.decode(errors="replace")[-1500:] if isinstance(expired.stderr, bytes) else ""
        error = f"timeout after {timeout:.0f} s (deadline) {tail}"
    seconds = time.perf_counter() - t
    records = []
    with open(path) as f:
        for line in f:
            records.append(json.loads(line))
    os.unlink(path)
    return records, error, seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--models", default="S/16,B/16,L/16")
    p.add_argument("--batch-sizes", default="1,32,128", help="inference")
    p.add_argument("--train-batch-sizes", default="32,128")
    p.add_argument("--memory-test", default="", help="MODEL:BATCH training rows, each in a fresh process")
    p.add_argument("--frameworks", default="keras,timm", help="keras (keras_vit), timm, kerashub (keras-hub's ViT)")
    p.add_argument("--modes", default="infer,train",
                   help="infer, train (the jitted step), predict, fit (model.predict / model.fit on uint8 arrays; "
                        "keras and kerashub only)")
    p.add_argument("--fit-steps", type=int, default=40, help="fit/predict: batches in the array of one call")
    p.add_argument("--steps-per-execution", type=int, default=10, help="fit/predict: model.compile's")
    p.add_argument("--precision", default="mixed_bfloat16")
    p.add_argument("--attention", default="default", choices=["default", "unpadded", "always", "cudnn-padded"],
                   help="keras_vit's attention padding (see install_attention's docstring)")
    p.add_argument("--torch-mode", default="", help="torch.compile mode, e.g. reduce-overhead (CUDA graphs)")
    p.add_argument("--mem-fraction", default="", help="XLA_PYTHON_CLIENT_MEM_FRACTION for the JAX workers")
    p.add_argument("--dump", default="", help="folder: XLA's HLO dumps (JAX workers), inductor's (timm)")
    p.add_argument("--profile", default="", help="folder: 5 more calls of each row under jax.profiler / torch.profiler")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.5, help="seconds per timed repeat")
    p.add_argument("--deadline", type=float, default=560.0, help="seconds: start no worker after it")
    p.add_argument("--sanity", action="store_true")
    p.add_argument("--env", action="store_true")
    p.add_argument("--tiny", action="store_true", help="2-layer 32x32 model: a check of the script, on any device")
    p.add_argument("--out", required=False, default="gpu.json")
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)

    start = time.perf_counter()
    models = ["tiny"] if args.tiny else args.models.split(",")
    result = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "precision": args.precision,
              "repeats": args.repeats, "min_time_s": args.min_time, "environment": {}, "sanity": None,
              "records": []}

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    def remaining():
        return args.deadline - (time.perf_counter() - start)

    def log(msg):
        print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)

    if args.env:
        for name in ("env", "env_jax"):
            records, error, _ = run_worker({"worker": name}, min(remaining(), 120))
            for r in records:
                result["environment"].update(r)
            if error:
                result["environment"][f"{name}_error"] = error
        log(f"environment: {json.dumps(result['environment'])}")
        save()
    if args.sanity:
        records, error, seconds = run_worker({"worker": "sanity"}, min(remaining(), 180))
        result["sanity"] = records[0] if records else {"error": error}
        log(f"sanity ({seconds:.0f} s): {json.dumps(result['sanity'])}")
        save()

    units = []
    for model in models:
        for mode in args.modes.split(","):
            sizes = args.batch_sizes if mode in ("infer", "predict") else args.train_batch_sizes
            batches = [int(b) for b in sizes.split(",") if b]
            for framework in args.frameworks.split(","):
                if framework == "timm" and mode in ("fit", "predict"):
                    continue  # timm has no fit/predict: its rows are the compiled step
                units.append((framework, model, mode, batches, False))
    for item in filter(None, args.memory_test.split(",")):
        model, batch = item.split(":")
        for framework in args.frameworks.split(","):
            units.append((framework, model, "train", [int(batch)], True))

    for framework, model, mode, batches, memory_test in units:
        variant = {"keras": args.attention, "timm": args.torch_mode}.get(framework) or "default"
        if framework != "timm" and args.mem_fraction:
            variant += f", XLA_PYTHON_CLIENT_MEM_FRACTION={args.mem_fraction}"
        base = {"framework": framework, "model": model, "mode": mode, "memory_test": memory_test,
                "variant": variant, "runtime": RUNTIMES[framework, mode in ("fit", "predict")]}
        if remaining() < 20:
            for b in batches:
                result["records"].append(dict(base, batch_size=b, status="not run: out of time"))
            log(f"skip {framework} {model} {mode} {batches}: out of time")
            save()
            continue
        spec = {"worker": framework, "model": model, "mode": mode, "batch_sizes": batches,
                "precision": args.precision, "repeats": args.repeats, "min_time": args.min_time,
                "attention": args.attention, "torch_mode": args.torch_mode, "fit_steps": args.fit_steps,
                "profile": os.path.abspath(args.profile) if args.profile else "",
                "steps_per_execution": args.steps_per_execution}
        records, error, seconds = run_worker(spec, remaining(), args.mem_fraction, args.dump)
        done = set()
        for r in records:
            done.add(r["batch_size"])
            if "skipped" in r:
                result["records"].append(dict(base, status="skipped", **r))
                log(f"{framework} {model} {mode} b={r['batch_size']} skipped: {r['skipped']}")
                continue
            result["records"].append(dict(base, status="ok", **r))
            log(f"{framework:5s} {model} {mode:5s} b={r['batch_size']:4d} {r['images_per_second']:10.1f} img/s "
                f"peak {r['peak_memory_mb']:8.0f} MB compile {r['compile_s']:.1f} s")
        for b in batches:
            if b not in done:
                result["records"].append(dict(base, batch_size=b, status="failed", error=error or "no record"))
                log(f"{framework} {model} {mode} b={b} FAILED: {(error or 'no record')[-800:]}")
        log(f"{framework} {model} {mode} took {seconds:.0f} s")
        save()

    result["ratios"] = ratios(result["records"])
    result["total_seconds"] = time.perf_counter() - start
    save()
    for r in result["ratios"]:
        log(f"ratio {r['model']} {r['mode']} b={r['batch_size']}: {r['name']} {r['ratio']:.3f}")
    return 0


RUNTIMES = {
    ("keras", False): "keras_vit / Keras JAX, mixed_bfloat16, jax.jit",
    ("keras", True): "keras_vit / Keras JAX, mixed_bfloat16, model.fit / model.predict on uint8 NumPy",
    ("kerashub", False): "keras-hub ViTBackbone + head / Keras JAX, mixed_bfloat16, jax.jit",
    ("kerashub", True): "keras-hub ViTBackbone + head / Keras JAX, mixed_bfloat16, model.fit / model.predict on uint8",
    ("timm", False): "timm / torch.compile, autocast bfloat16",
}
# the jitted step each plain Keras call is compared with
STEP_OF = {"fit": "train", "predict": "infer"}


def ratios(records):
    """Ratios of images/s between rows of one run (``default`` variants): keras_vit / timm and keras_vit /
    keras-hub on the same mode, and each plain Keras call over the jitted step of the same framework."""
    index = {(r["framework"], r["model"], r["mode"], r["batch_size"], r["memory_test"]): r
             for r in records if r.get("status") == "ok" and r["variant"] == "default"}
    out = []
    for (framework, model, mode, batch, memory_test), r in index.items():
        pairs = []
        if framework == "keras":
            pairs += [("keras_vit_over_timm", index.get(("timm", model, mode, batch, memory_test))),
                      ("keras_vit_over_keras_hub", index.get(("kerashub", model, mode, batch, memory_test)))]
        if mode in STEP_OF:
            name = "keras_vit" if framework == "keras" else "keras_hub"
            pairs.append((f"{name}_{mode}_over_jitted_{STEP_OF[mode]}",
                          index.get((framework, model, STEP_OF[mode], batch, memory_test))))
        for name, other in pairs:
            if other:
                out.append({"name": name, "model": model, "mode": mode, "batch_size": batch,
                            "memory_test": memory_test, "ratio": r["images_per_second"] / other["images_per_second"],
                            name: r["images_per_second"] / other["images_per_second"],
                            "peak_mb": r["peak_memory_mb"], "other_peak_mb": other["peak_memory_mb"]})
    return out


if __name__ == "__main__":
    sys.exit(main())
