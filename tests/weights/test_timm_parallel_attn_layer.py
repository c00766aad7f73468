"""timm's ParallelScalingBlock ignores ``attn_layer`` (its attention is its own, "not used" in its signature): a
``vit_pwee_patch16_reg1_gap_256`` folder timm 1.0.31 writes with ``model_args.attn_layer='diff'`` computes plain
parallel attention and has no lambdas. It was read as differential attention and refused as lacking 10 keys
(``lambda_q1``...); it now loads and matches timm itself (8.2e-7 relative)."""

import json
import os

import numpy as np
import pytest

import keras_vit
import reference_timm

safetensors_numpy = pytest.importorskip("safetensors.numpy")

ARGS = dict(patch_size=8, embed_dim=32, depth=2, num_heads=4, img_size=32, num_classes=5, class_token=False,
            no_embed_class=True, reg_tokens=1, global_pool="avg", init_values=1e-5, mlp_ratio=5.0, qkv_bias=True,
            block_fn="ParallelScalingBlock")


def _write(folder, architecture, **model_args):
    state = reference_timm.state_dict(ARGS, seed=6)
    os.makedirs(folder)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    stated = dict({k: ARGS[k] for k in ("patch_size", "embed_dim", "depth", "num_heads")}, **model_args)
    config = {"architecture": architecture, "num_classes": 5, "global_pool": "avg", "model_args": stated,
              "pretrained_cfg": {"tag": "test", "input_size": [3, 32, 32], "num_classes": 5, "mean": [0.5] * 3, "std": [0.5] * 3}}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return state


def test_attn_layer_diff_beside_a_parallel_scaling_block_is_timms_no_op(tmp_path):
    state = _write(tmp_path / "p", "vit_pwee_patch16_reg1_gap_256", attn_layer="diff")
    model = keras_vit.from_pretrained(str(tmp_path / "p"), classifier_activation=None)
    assert model.vit_config.parallel_blocks and not model.vit_config.differential_attention
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    ref = np.stack([reference_timm.forward(image, state, dict(ARGS, act_layer="gelu")) for image in x])
    assert np.max(np.abs(np.asarray(model(x), np.float64) - ref)) <= 1e-4 * np.max(np.abs(ref))


def test_attn_layer_diff_still_makes_sequential_blocks_differential(tmp_path):
    """vit_wee with attn_layer='diff' is vit_dwee's computation: without the lambdas the file is refused (as before)."""
    args = dict(ARGS, block_fn="Block")
    state = reference_timm.state_dict(args, seed=6)
    os.makedirs(tmp_path / "s")
    safetensors_numpy.save_file(state, str(tmp_path / "s" / "model.safetensors"))
    config = {"architecture": "vit_wee_patch16_reg1_gap_256", "num_classes": 5, "global_pool": "avg",
              "model_args": {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 4, "attn_layer": "diff"},
              "pretrained_cfg": {"tag": "test", "input_size": [3, 32, 32], "num_classes": 5, "mean": [0.5] * 3, "std": [0.5] * 3}}
    (tmp_path / "s" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="lambda_q1"):
        keras_vit.from_pretrained(str(tmp_path / "s"), classifier_activation=None)
