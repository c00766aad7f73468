"""LoRA on any keras_vit model: Keras' own ``enable_lora`` on the attention and MLP projections, and the merge back.

* :func:`enable_lora` -- freeze the model, put Keras' LoRA factors (``lora_kernel_a`` ``(in, rank)``,
  ``lora_kernel_b`` ``(rank, out)``, ``B`` zero at first) on the chosen projections of every Transformer
  block (and of SigLIP's MAP head), and leave the classification head trainable: the trainable weights are
  the LoRA factors and the head, nothing else (a conv stem's BatchNorm stays in inference mode).
  keras-hub's ``Backbone.enable_lora(rank)`` is the precedent; it puts LoRA on the query and value
  projections only, which ``targets=("query", "value")`` gives here.
* :func:`merge_lora` -- a plain copy of the model, each adapted kernel replaced by ``W + (alpha / rank) A B``:
  what ``.keras`` files hold (Keras' ``Dense`` and ``EinsumDense`` save the merged kernel), what to export.
* :func:`lora_state` / :func:`restore_lora_state` -- the frozen kernels and the factors, unmerged, as arrays:
  a weights file (``save_weights``) holds the merged kernel and Keras zeroes both factors when it loads one,
  which would leave a resumed run with no gradient to follow (:class:`keras_vit.train.backup.Backup` keeps
  these beside its backup).

Example:
>>> import keras_vit
>>> model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
...                       num_classes=3)
>>> adapted = enable_lora(model, rank=2, targets=("query", "value"))
>>> adapted
['transformer_block_0/attention/query', 'transformer_block_0/attention/value']
>>> sorted(v.path for v in model.trainable_weights)  # doctest: +NORMALIZE_WHITESPACE
['head/bias', 'head/kernel', 'transformer_block_0/attention/query/lora_kernel_a',
 'transformer_block_0/attention/query/lora_kernel_b', 'transformer_block_0/attention/value/lora_kernel_a',
 'transformer_block_0/attention/value/lora_kernel_b']
"""

import os
import tempfile

import numpy as np

from keras_vit import saving
from keras_vit.architecture.model import config_of
from keras_vit.architecture.state import layer_quantization
from keras_vit.domains import POSITIVE_INT

QLORA_MODES = ("int8", "int4")  # the modes of model.quantize whose layers run Keras' LoRA factors (float8's refuse them)
# target -> the names of the layers it adapts (keras_vit's SelfAttention, TransformerBlock and AttentionPooling)
TARGETS = {
    "query": ("query",),
    "key": ("key",),
    "value": ("value",),
    "out": ("attention_output",),
    "mlp": ("mlp_dense_1", "mlp_dense_2"),
}
DEFAULT_TARGETS = tuple(TARGETS)
HEADS = ("head", "head_distillation")  # the classification heads, which train beside the factors
_PARENTS = ("attention", "map_head")  # the layers whose projections the targets name, besides the blocks


def _check_targets(targets):
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ValueError(f"Unknown LoRA target: expected some of {DEFAULT_TARGETS}. Received: targets={targets!r}")
    return targets


def _in_encoder(layer):
    """True for a projection inside a Transformer block or the MAP head (not a top-level layer named alike)."""
    parts = (layer.path or "").split("/")
    return len(parts) > 1 and (parts[0].startswith("transformer_block_") or parts[0] in _PARENTS)


def lora_layers(model):
    """The layers of ``model`` that carry LoRA factors, in order."""
    return [layer for layer in model._flatten_layers(include_self=False) if getattr(layer, "lora_enabled", False)]


def _check_rank(rank, layers):
    """Refuse factors with as many weights as the kernel they adapt, or more: no longer low-rank (rank 1,000 on a
    width-32 model gave 1.3 M trainable weights for a 24 k model). Keras' factors of a ``(..., out)`` kernel are
    ``(..., rank)`` and ``(rank, out)``."""
    worst = None
    for layer in layers:
        kernel = getattr(layer, "_kernel", None)
        if kernel is None or len(kernel.shape) < 2:
            continue
        inner, out = int(np.prod(kernel.shape[:-1])), int(kernel.shape[-1])
        factors, size = rank * (inner + out), inner * out
        if factors >= size and (worst is None or size < worst[1]):
            worst = (factors, size, layer.name)
    if worst is not None:
        factors, size, name = worst
        raise ValueError(
            f"`rank`={rank} is not a low rank for this model: the factors of layer {name!r} would have {factors:,} "
            f"weights, its kernel has {size:,}. Use a smaller rank (4 to 16 is usual), or fine-tune the whole model."
        )


def enable_lora(model, rank, targets=DEFAULT_TARGETS, *, alpha=None):
    """Freeze ``model`` (in place) but for LoRA factors of rank ``rank`` on ``targets`` and the head.

    Args:
        model: a keras_vit model (plain, hybrid, conv stem or family), float or quantized by
            ``model.quantize("int8")`` or ``"int4"`` (QLoRA: Keras adds float32 factors to the integer kernels).
            A model compiled and fit before: compile it again after (its optimizer was built for the full model's
            trainable weights; Keras refuses the factors by name until then).
        rank: the rank of the factors, a positive int.
        targets: some of ``"query"``, ``"key"``, ``"value"``, ``"out"`` (the attention output projection) and
            ``"mlp"`` (both MLP layers), in every block and in a MAP head.
        alpha: the factors' scale is ``alpha / rank`` (Keras' ``lora_alpha``; default ``rank``, a scale of 1).

    Returns:
        The paths of the adapted layers, sorted.

    Raises:
        ValueError: not a keras_vit model, a rank that is not a positive int, an unknown target, LoRA already
            enabled, a quantization whose layers have no LoRA (float8), or no layer to adapt. Nothing is changed.
    """
    config = config_of(model)
    rank = POSITIVE_INT.check(rank, "rank")
    targets = _check_targets(targets)
    if lora_layers(model):
        raise ValueError(f"LoRA is already enabled on model {model.name!r}: {[l.path for l in lora_layers(model)]}")
    names = {name for target in targets for name in TARGETS[target]}
    chosen = [
        layer
        for layer in model._flatten_layers(include_self=False)
        if layer.name in names and _in_encoder(layer) and hasattr(layer, "enable_lora")
    ]
    if not chosen:
        raise ValueError(f"Model {model.name!r} has no layer that targets={targets!r} names")
    _check_rank(rank, chosen)
    without = sorted({str(layer_quantization(layer)) for layer in chosen} - {"None", *QLORA_MODES})
    if without:  # checked on the layers LoRA goes on: int8 and int4 mixed are QLoRA, a float8 MLP untouched by it too
        raise ValueError(f"Model {model.name!r} has layers that targets={targets!r} names quantized to {without}, whose "
                         f"Keras layers run no LoRA factors; LoRA goes on float layers and those quantized to "
                         f"{' or '.join(QLORA_MODES)}.")
    model.trainable = True
    for layer in model._flatten_layers(include_self=False):
        if not list(layer._flatten_layers(include_self=False)):  # leaves: the layers that own the weights
            layer.trainable = False  # a BatchNorm of a conv stem then normalises with its moving statistics
    for layer in chosen:
        layer.trainable = True
        layer.enable_lora(rank, lora_alpha=alpha)
    factors = {id(v) for layer in chosen for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    # a head's variables that Keras made trainable: a quantized head's integer kernel and its scale are not (jax.grad
    # refuses an int8 variable: QLoRA did not fit on JAX), its bias is
    heads = {id(v) for layer in model.layers if layer.name in HEADS and config.include_top
             for v in layer._trainable_variables}
    for variable in model.weights:  # the adapted layers' biases and the tokens of the patch encoder too
        variable.trainable = id(variable) in factors or id(variable) in heads
    # a model already fit or predicted keeps Keras' traced functions of the model without LoRA (they would predict
    # without the factors and train the frozen kernels); dropped as Keras' own Model.quantize drops them
    model.train_function = model.test_function = model.predict_function = None
    return sorted(layer.path for layer in chosen)


def merge_lora(model):
    """A plain copy of ``model`` whose adapted kernels hold ``W + (alpha / rank) A B`` (no LoRA variables).

    Keras' own merge: the ``.keras`` file Keras writes for a LoRA model holds the merged kernels, and the
    keras_vit layers create their projections again without factors when it is read. Class names are kept.

    Raises:
        ValueError: not a keras_vit model, or one without LoRA.
    """
    config_of(model)
    if not lora_layers(model):
        raise ValueError(f"Model {model.name!r} has no LoRA factors to merge (keras_vit.enable_lora adds them)")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"{model.name}.keras")
        saving.save_model(model, path, include_optimizer=False)
        return saving.load_model(path)


def lora_state(model):
    """``{path: array}`` of each adapted layer's frozen kernel and factors, unmerged (empty without LoRA)."""
    state = {}
    for layer in lora_layers(model):
        state[f"{layer.path}/kernel"] = layer._kernel.numpy()
        state[f"{layer.path}/lora_kernel_a"] = layer.lora_kernel_a.numpy()
        state[f"{layer.path}/lora_kernel_b"] = layer.lora_kernel_b.numpy()
    return state


def restore_lora_state(model, state, *, where):
    """Assign a :func:`lora_state` to ``model``; a ``ValueError`` naming ``where`` if it does not fit."""
    variables = {}
    for layer in lora_layers(model):
        variables[f"{layer.path}/kernel"] = layer._kernel
        variables[f"{layer.path}/lora_kernel_a"] = layer.lora_kernel_a
        variables[f"{layer.path}/lora_kernel_b"] = layer.lora_kernel_b
    missing = sorted(set(variables) ^ set(state))
    wrong = [k for k in sorted(set(variables) & set(state)) if tuple(variables[k].shape) != tuple(state[k].shape)]
    if missing or wrong:
        raise ValueError(
            f"The LoRA factors in {where} do not fit this model: "
            f"{'not in both: ' + ', '.join(missing[:4]) if missing else 'other shapes: ' + ', '.join(wrong[:4])}"
        )
    for key, variable in variables.items():
        variable.assign(state[key])
