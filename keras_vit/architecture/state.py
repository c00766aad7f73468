"""What a model's weights are now: float, quantized by ``model.quantize``, or carrying LoRA factors.

Every writer of weights (the checkpoint loader, :func:`keras_vit.resize_model`, the keras-hub exporter)
copies or assigns float kernels by name. A quantized layer holds an integer kernel and a scale instead (a
float assigned to it is cast to integers: zeros, with the old scale kept), and a layer with LoRA computes
``W + (alpha / rank) A B`` (new kernels under old factors). :func:`model_state` says which of these a model
is in, from Keras' own attributes (each layer's dtype policy's ``quantization_mode``, ``lora_enabled``), and
:func:`require_float` refuses anything but a float model before the writer touches a weight, naming the way
out.

Example:
>>> import keras_vit
>>> model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
...                       num_classes=3)
>>> model_state(model).kind
'float'
>>> model.quantize("int8")
>>> state = model_state(model)
>>> state.kind, state.quantization
('quantized', 'int8')
"""

import dataclasses

import numpy as np

from keras_vit.layers.policies import own_policy


@dataclasses.dataclass(frozen=True)
class ModelState:
    """The state of a model's weights.

    Attributes:
        quantization: the mode of ``model.quantize`` (``"int8"``, ``"float8"``, ``"int4"``...) or None.
        quantized_layers: the paths of the quantized layers.
        lora_rank: the rank of the LoRA factors, or None without LoRA.
        lora_layers: the paths of the layers that carry LoRA factors.
        lora_trained: whether any factor ``B`` is non-zero (Keras starts it at zero: no effect yet).
    """

    quantization: object = None
    quantized_layers: tuple = ()
    lora_rank: object = None
    lora_layers: tuple = ()
    lora_trained: bool = False

    @property
    def kind(self):
        """``"lora"`` (LoRA first: a quantized model with LoRA is QLoRA), ``"quantized"`` or ``"float"``."""
        if self.lora_layers:
            return "lora"
        return "quantized" if self.quantized_layers else "float"

    def describe(self):
        """The state in words, e.g. ``"quantized (int8, 13 layers)"``."""
        parts = []
        if self.lora_layers:
            factors = "trained factors" if self.lora_trained else "factors still zero"
            parts.append(f"LoRA enabled (rank {self.lora_rank} on {len(self.lora_layers)} layers, {factors})")
        if self.quantized_layers:
            parts.append(f"quantized ({self.quantization}, {len(self.quantized_layers)} layers)")
        return " and ".join(parts) or "float"


def layer_quantization(layer):
    """The mode of ``model.quantize`` a layer's own weights are in (``"int8"``...), or None for a float layer."""
    try:
        return own_policy(layer).quantization_mode
    except (AttributeError, KeyError):
        return getattr(layer, "quantization_mode", None)


def model_state(model):
    """The :class:`ModelState` of ``model`` (any Keras model), read from its layers."""
    quantized, modes, lora, ranks, trained = [], [], [], [], False
    for layer in model._flatten_layers(include_self=False):
        mode = layer_quantization(layer)
        if mode is not None:
            quantized.append(layer.path or layer.name)
            modes.append(str(mode))
        if getattr(layer, "lora_enabled", False):
            lora.append(layer.path or layer.name)
            ranks.append(int(layer.lora_rank))
            trained = trained or bool(np.any(np.asarray(layer.lora_kernel_b.numpy()) != 0))
    return ModelState(
        quantization="/".join(sorted(set(modes))) or None,
        quantized_layers=tuple(quantized),
        lora_rank=(ranks[0] if len(set(ranks)) == 1 else "/".join(map(str, sorted(set(ranks))))) if ranks else None,
        lora_layers=tuple(lora),
        lora_trained=trained,
    )


def require_float(model, action, verb):
    """Refuse (``ValueError``) a model that is not float, before ``action`` touches a weight.

    Args:
        model: the model about to be written into or read from.
        action: what was asked, for the message (``"load weights into"``, ``"resize"``, ``"export"``).
        verb: the way out's verb (``"load into"``, ``"resize"``, ``"export"``).

    Returns:
        The :class:`ModelState` (float).

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=16, num_layers=1, num_heads=2,
    ...                       mlp_dim=32, num_classes=3)
    >>> model.quantize("int8")
    >>> require_float(model, "resize", "resize")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Cannot resize model 'vit': it is quantized (int8, ...resize the float model, then call model.quantize('int8')...
    """
    state = model_state(model)
    if state.kind == "float":
        return state
    name = getattr(model, "name", None)
    if state.kind == "lora":
        way_out = (
            "call keras_vit.merge_lora(model) first (a plain copy with W + (alpha / rank) A B in each kernel) and "
            f"{verb} that"
        )
        why = "its LoRA factors would stay on top of the kernels and the kernels are not what it computes"
    else:
        way_out = f"{verb} the float model, then call model.quantize({state.quantization!r})"
        why = "its kernels are integers with their own scales, so float weights cannot be copied into or out of them"
    raise ValueError(
        f"Cannot {action} model {name!r}: it is {state.describe()}; {why}. Instead, {way_out}. "
        "Nothing was assigned or written."
    )
