"""A parallel block's dropout is timm's ParallelScalingBlock's: after the MLP's activation only (``mlp_drop``), none
after the attention output projection or the MLP's output projection (timm's sequential Block has both, and so has
keras_vit's sequential block). keras_vit dropped out both branch outputs of a parallel block too, so fine-tuning
with ``dropout > 0`` regularised another model than timm's."""

import numpy as np

import keras
from keras_vit.layers import TransformerBlock


def _block(parallel, differential=None):
    block = TransformerBlock(num_heads=2, mlp_dim=16, dropout=0.5, parallel=parallel, layer_scale_init=0.5,
                             differential_lambda_init=differential, name="transformer_block_0")
    block.build((2, 5, 8))
    # an MLP whose hidden activations are 0 (its first layer all zeros, GELU(0) = 0) and whose output is its bias:
    # dropout after the activation changes nothing, dropout after either output projection would
    block.mlp_dense_1.kernel.assign(np.zeros(block.mlp_dense_1.kernel.shape, "float32"))
    block.mlp_dense_1.bias.assign(np.zeros(block.mlp_dense_1.bias.shape, "float32"))
    block.mlp_dense_2.bias.assign(np.ones(block.mlp_dense_2.bias.shape, "float32"))
    return block


def test_a_parallel_block_drops_out_neither_branch_output():
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    for differential in (None, 0.2):
        block = _block(parallel=True, differential=differential)
        inference = keras.ops.convert_to_numpy(block(x))
        for _ in range(3):
            np.testing.assert_allclose(keras.ops.convert_to_numpy(block(x, training=True)), inference, rtol=1e-6, atol=1e-6)


def test_a_sequential_block_still_drops_out_its_branch_outputs():
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    block = _block(parallel=False)
    inference = keras.ops.convert_to_numpy(block(x))
    assert any(np.max(np.abs(keras.ops.convert_to_numpy(block(x, training=True)) - inference)) > 1e-3 for _ in range(3))
