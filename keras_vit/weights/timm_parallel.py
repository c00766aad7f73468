"""timm's parallel blocks (``ParallelScalingBlock``, ViT-22B's) as a sequential block's keys, one norm and one scale.

``ParallelScalingBlock`` computes ``x + ls(attn_out_proj(MSA(q, k, v)) + mlp_out_proj(act(x_mlp)))`` where
``x_mlp, q, k, v`` are the row blocks ``[mlp_hidden, D, D, D]`` of one ``in_proj`` of ``in_norm(x)``: the same as
keras_vit's ``TransformerBlock(parallel=True)``, whose attention and MLP read ``layer_norm_1`` and whose branches'
sum ``layer_scale_1`` scales; ``DiffParallelScalingBlock``'s differential attention parameters (``lambda_*``,
``sub_norm``) become ``attn.``'s, as ``DiffAttention`` names them. The keys become a sequential block's (``norm1``, ``attn.qkv``, ``attn.proj``,
``mlp.fc1``, ``mlp.fc2``, ``ls1``) without ``norm2`` and ``ls2``; ``mlp_bias`` (``qkv_bias=False``) is ``mlp.fc1``'s
bias. A fused ``out_proj`` (``fuse_out_proj=True``: ``[attention | MLP]`` input columns) is split into
``attn.proj`` (with its bias) and ``mlp.fc2`` (a zero bias): exact, ``cat(a, m) W^T + b = a W_a^T + b + m W_m^T``.
With ``proj_bias=False`` the MLP keeps its first bias (``in_proj``'s rows or ``mlp_bias``) and ``mlp.fc2`` takes a
zero bias (exact): keras_vit's ``mlp_bias`` is both layers'.
"""

import numpy as np

from keras_vit.errors import CheckpointError

MARKER = "blocks.0.in_proj.weight"  # a parallel block's: the fused projection of the MLP and the attention


def _width(tensors, base, path):
    """D: the width of the block's ``in_norm`` (its weight), the parallel block's input."""
    norm = tensors.get(base + "in_norm.weight")
    if norm is None or np.ndim(norm) != 1:
        raise CheckpointError(f"Checkpoint {path!r}: {base}in_proj without a 1-D {base}in_norm.weight: not timm's "
                              "ParallelScalingBlock, whose width it gives.")
    return int(norm.shape[0])


def to_vit_layout(tensors, path="<arrays>"):
    """``{timm key: array}`` with every parallel block's keys as a sequential block's (see the module); other keys
    as they are. A fused projection whose rows are not ``mlp_hidden + 3 D`` is refused naming the key.

    Example:
    >>> d, m = 4, 10
    >>> keys = {"blocks.0.in_norm.weight": np.ones(d), "blocks.0.in_proj.weight": np.zeros((m + 3 * d, d)),
    ...         "blocks.0.mlp_bias": np.zeros(m), "blocks.0.attn_out_proj.weight": np.zeros((d, d)),
    ...         "blocks.0.mlp_out_proj.weight": np.zeros((d, m)), "blocks.0.ls.gamma": np.ones(d)}
    >>> {k: v.shape for k, v in sorted(to_vit_layout(keys).items())}  # doctest: +NORMALIZE_WHITESPACE
    ... # (no out-projection biases: proj_bias=False; mlp.fc2 takes a zero bias beside fc1's)
    {'blocks.0.attn.proj.weight': (4, 4), 'blocks.0.attn.qkv.weight': (12, 4), 'blocks.0.ls1.gamma': (4,),
     'blocks.0.mlp.fc1.bias': (10,), 'blocks.0.mlp.fc1.weight': (10, 4), 'blocks.0.mlp.fc2.bias': (4,),
     'blocks.0.mlp.fc2.weight': (4, 10), 'blocks.0.norm1.weight': (4,)}
    """
    bases = [key[: -len("in_proj.weight")] for key in tensors if key.endswith(".in_proj.weight") and key.startswith("blocks.")]
    if not bases:
        return tensors
    out = dict(tensors)
    for base in bases:
        width = _width(tensors, base, path)
        fused = out.pop(base + "in_proj.weight")
        mlp = fused.shape[0] - 3 * width
        if fused.ndim != 2 or mlp < 1 or fused.shape[1] != width:
            raise CheckpointError(f"Checkpoint {path!r}: {base}in_proj.weight has shape {tuple(fused.shape)}; timm's "
                                  f"ParallelScalingBlock of width {width} has (mlp_hidden + 3 x {width}, {width}).")
        out[base + "mlp.fc1.weight"], out[base + "attn.qkv.weight"] = fused[:mlp], fused[mlp:]
        if base + "in_proj.bias" in out:  # qkv_bias=True: the MLP's bias is in_proj's too
            bias = out.pop(base + "in_proj.bias")
            out[base + "mlp.fc1.bias"], out[base + "attn.qkv.bias"] = bias[:mlp], bias[mlp:]
        if base + "mlp_bias" in out:
            out[base + "mlp.fc1.bias"] = out.pop(base + "mlp_bias")
        for old, new in (("in_norm.", "norm1."), ("attn_out_proj.", "attn.proj."), ("mlp_out_proj.", "mlp.fc2."),
                         ("ls.", "ls1."), ("sub_norm.", "attn.sub_norm."), ("lambda_", "attn.lambda_")):
            for key in [k for k in out if k.startswith(base + old)]:
                out[base + new + key[len(base + old):]] = out.pop(key)
        if base + "out_proj.weight" in out:  # fuse_out_proj: [attention | MLP] input columns
            joint = out.pop(base + "out_proj.weight")
            out[base + "attn.proj.weight"], out[base + "mlp.fc2.weight"] = joint[:, :width], joint[:, width:]
            if base + "out_proj.bias" in out:
                bias = out.pop(base + "out_proj.bias")
                out[base + "attn.proj.bias"], out[base + "mlp.fc2.bias"] = bias, np.zeros_like(bias)
        if base + "mlp.fc1.bias" in out and base + "mlp.fc2.bias" not in out:  # proj_bias=False: fc1's bias is kept
            out[base + "mlp.fc2.bias"] = np.zeros(out[base + "mlp.fc2.weight"].shape[0], out[base + "mlp.fc1.bias"].dtype)
    return out
