"""What several weight sources share (they import it from here, never from each other): the input normalisations
they declare, PyTorch's tensor layout, and the sorting of a file's keys into renamed, skipped and unknown.
"""

import math
import re

import numpy as np

from keras_vit.errors import CheckpointError

# (mean, std) of the input normalisations the families were trained with
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
CLIP_MEAN_STD = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
MASK = "the mask token of masked-image modelling (unused at inference)"  # why a layout skips it


def linear(name, canonical):
    """A PyTorch ``nn.Linear`` (or ``Conv2d``) ``name`` -> ``{name.weight: canonical/kernel, name.bias: canonical/bias}``."""
    return {f"{name}.weight": f"{canonical}/kernel", f"{name}.bias": f"{canonical}/bias"}


def norm(name, canonical):
    """A PyTorch ``nn.LayerNorm`` ``name`` -> ``{name.weight: canonical/scale, name.bias: canonical/bias}``."""
    return {f"{name}.weight": f"{canonical}/scale", f"{name}.bias": f"{canonical}/bias"}


def torch_tensors(key, name, array, path):
    """``{original key: array}`` of the PyTorch tensor ``key`` going to ``name``: ``nn.Linear`` weights ``(out, in)``
    transposed, the patch ``Conv2d`` ``(D, C, P, P)`` as ``(P, P, C, D)``, ``nn.Embedding`` positions ``(N, D)`` as
    ``(1, N, D)``, a ``(D,)`` class token as ``(1, 1, D)``; a fused ``.../qkv/...`` (``[query; key; value]``) or
    ``.../kv/...`` tensor split into its parts, keys first, as timm's ``Attention`` and ``nn.MultiheadAttention`` do.

    Example:
    >>> out = torch_tensors("attn.qkv.weight", "MHA/qkv/kernel", np.zeros((24, 8)), "m")
    >>> {k: v.shape for k, v in out.items()}
    {'MHA/query/kernel': (8, 8), 'MHA/key/kernel': (8, 8), 'MHA/value/kernel': (8, 8)}
    """
    fused = next((f for f in ("qkv", "kv") if f"/{f}/" in name), None)
    if fused is None:
        if name == "embedding/kernel":  # the patch Conv2d (D, C, P, P) -> (P, P, C, D)
            if array.ndim != 4:
                raise CheckpointError(f"Checkpoint {path!r}: {key!r} has shape {array.shape}, expected (D, C, P, P).")
            return {name: array.transpose(2, 3, 1, 0)}
        if name == "Transformer/posembed_input/pos_embedding" and array.ndim == 2:
            return {name: array[None]}
        if name == "cls" and array.ndim == 1:
            return {name: array[None, None]}
        return {name: array.T if array.ndim == 2 and name.endswith("/kernel") else array}
    parts = ("query", "key", "value")[3 - len(fused):]
    kernel = name.endswith("/kernel")
    width = array.shape[-1] if kernel else array.shape[0] // len(parts)
    if array.shape[0] != len(parts) * width or array.ndim != 1 + kernel:
        raise CheckpointError(f"Checkpoint {path!r}: {key!r} has shape {tuple(array.shape)}, expected a fused "
                              f"[{'; '.join(parts)}] tensor of {len(parts)} x the width.")
    return {name.replace(f"/{fused}/", f"/{part}/"): array[i * width:(i + 1) * width].T if kernel else array[i * width:(i + 1) * width]
            for i, part in enumerate(parts)}


def patch_linear(key, array, path):
    """PyTorch's patch ``Conv2d`` ``(D, C, P, P)`` of an ``nn.Linear`` ``(D, P * P * 3)`` over patches flattened as
    ``(P, P, C)`` (timm's NaFlexVit ``embeds.proj``, transformers' SigLIP 2 ``convert_image_to_patches``)."""
    side = math.isqrt(array.shape[-1] // 3)
    if array.ndim != 2 or side * side * 3 != array.shape[-1]:
        raise CheckpointError(f"Checkpoint {path!r}: {key!r} {tuple(array.shape)} is no linear embedding of square RGB "
                              "patches (D, P * P * 3).")
    return np.transpose(np.reshape(array, (array.shape[0], side, side, 3)), (0, 3, 1, 2))


def joined(parts, axis=-1):
    """``np.concatenate(parts, axis)`` of arrays; stand-ins (zero strides, no data) joined into a stand-in, so that
    a layout converter that joins two tensors (a gated MLP's two halves) runs on shapes without allocating them."""
    if all(not any(p.strides) for p in parts):
        shape = list(parts[0].shape)
        shape[axis] = sum(p.shape[axis] for p in parts)
        return np.broadcast_to(np.zeros((), parts[0].dtype), tuple(shape))
    return np.concatenate([np.asarray(p) for p in parts], axis=axis)


def renamed(keys, rename, skip, label=None, skipped=None):
    """``(names, skipped, unknown)`` of ``keys``: ``{key: rename(key)}`` where not None; ``{label(match, key): (count,
    reason)}`` (added to ``skipped``) of those a regex of ``skip`` (``{regex: reason}``) finds, counted by default
    under its named group ``group`` + ``*``, else the key; ``unknown``: the others.

    Example:
    >>> renamed(["text_a", "text_b", "cls", "odd"], {"cls": "cls"}.get, {"^(?P<group>text_)": "the text tower"})
    ({'cls': 'cls'}, {'text_*': (2, 'the text tower')}, ['odd'])
    """
    names, skipped, unknown = {}, {} if skipped is None else skipped, []
    for key in keys:
        match = next(filter(None, (re.search(pattern, key) for pattern in skip)), None)
        if match is not None:
            group = label(match, key) if label else (match["group"] + "*" if match.groupdict().get("group") else key)
            skipped[group] = (skipped.get(group, (0,))[0] + 1, skip[match.re.pattern])
        elif (name := rename(key)) is not None:
            names[key] = name
        else:
            unknown.append(key)
    return names, skipped, unknown


def counted(skipped):
    """``{"what (n tensors)": reason}`` of ``{what: (n, reason)}``, as a load report names what was left out."""
    return {f"{what} ({n} tensor{'s' if n > 1 else ''})": why for what, (n, why) in skipped.items()}


def finish(out, unknown, path, layout):
    """Refuse the keys no ViT has (named, at most 10 shown); returns ``out``."""
    if unknown:
        raise CheckpointError(
            f"Checkpoint {path!r} ({layout} layout) has {len(unknown)} key(s) that are not part of a ViT: "
            f"{', '.join(sorted(unknown)[:10])}"
        )
    return out
