"""keras_vit.layers.kernels: same results as the Keras layers, in the graph shape oneDNN fuses."""

import numpy as np
import pytest
import tensorflow as tf

import keras
from keras_vit.layers import kernels
from keras_vit.layers import TransformerBlock


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize("shape", [(3, 5, 8), (7, 8), (2, 1, 8)])
@pytest.mark.parametrize("gelu", [False, True])
def test_dense_equals_the_keras_layer(shape, gelu):
    layer = keras.layers.Dense(6, bias_initializer="random_normal")
    x = _x(*shape)
    expected = layer(x)
    if gelu:
        expected = keras.activations.gelu(expected, approximate=False)
    np.testing.assert_allclose(np.asarray(kernels.dense(x, layer, gelu=gelu)), np.asarray(expected), atol=1e-6)


def test_dense_with_a_dynamic_token_axis():
    layer = keras.layers.Dense(4)
    layer.build((None, None, 8))
    fn = tf.function(lambda x: kernels.dense(x, layer), input_signature=[tf.TensorSpec((None, None, 8))])
    x = _x(2, 3, 8)
    out = fn(x)
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(np.asarray(out), np.asarray(layer(x)), atol=1e-6)


def test_dense_without_bias_and_in_bfloat16():
    layer = keras.layers.Dense(6, use_bias=False, dtype="mixed_bfloat16")
    layer.build((None, 8))
    x = _x(2, 3, 8)
    out = kernels.dense(keras.ops.cast(x, "bfloat16"), layer)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    # both round to bfloat16, each in its own order: a float32 sum that falls on either side of a rounding point
    # gives results one bfloat16 step (2^-7 of the value) apart
    np.testing.assert_allclose(np.asarray(keras.ops.cast(out, "float32")),
                               np.asarray(keras.ops.cast(layer(x), "float32")), rtol=2.0**-7, atol=1e-2)


def test_quantized_dense_goes_through_the_layer():
    layer = keras.layers.Dense(6)
    layer.build((None, 8))
    layer.quantize("int8")
    x = _x(4, 8)
    # exact on purpose: kernels.dense must hand over to layer(x) itself; the same ops on the same input in
    # one process give the same bits on any CPU, and any other computation would show
    np.testing.assert_array_equal(np.asarray(kernels.dense(x, layer)), np.asarray(layer(x)))


@pytest.mark.parametrize("shape", [(3, 5, 16), (4, 16)])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_norm_equals_the_keras_layer(shape, policy):
    layer = keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    layer.build(shape)
    layer.gamma.assign(1 + _x(shape[-1], seed=1))
    layer.beta.assign(_x(shape[-1], seed=2))
    x = 3 + 2 * _x(*shape)
    if policy != "float32":
        x = keras.ops.cast(x, "bfloat16")
    out = kernels.layer_norm(x, layer)
    expected = layer(x)
    assert out.dtype == expected.dtype
    # bfloat16: two roundings can fall one step (2^-7 of the value) apart, on outputs up to ~5
    rtol, atol = (0, 1e-5) if policy == "float32" else (2.0**-7, 2e-2)
    np.testing.assert_allclose(np.asarray(keras.ops.cast(out, "float32")),
                               np.asarray(keras.ops.cast(expected, "float32")), rtol=rtol, atol=atol)


def test_layer_norm_over_another_axis_goes_through_the_layer():
    layer = keras.layers.LayerNormalization(axis=1)
    x = _x(2, 4, 3)
    # exact on purpose: the same call, layer(x), twice (see test_quantized_dense_goes_through_the_layer)
    np.testing.assert_array_equal(np.asarray(kernels.layer_norm(x, layer)), np.asarray(layer(x)))


def test_matmul_transposed():
    a, b = _x(2, 3, 5, 4), _x(2, 3, 6, 4, seed=1)
    np.testing.assert_allclose(np.asarray(kernels.matmul_transposed(a, b)), a @ np.swapaxes(b, -1, -2), atol=1e-5)


def test_block_graph_has_the_fusable_shape():
    """Every weight GEMM of a block is a rank-2 MatMul feeding a BiasAdd; the MLP's feeds the exact GELU.

    This is the shape grappler's remapper turns into ``_MklNativeFusedMatMul[BiasAdd(, GeluExact)]``
    (the speed is measured in benchmarks/, not here).
    """
    block = TransformerBlock(num_heads=2, mlp_dim=32)
    x = tf.constant(_x(2, 5, 16))
    block(x)
    graph = tf.function(lambda x: block(x)).get_concrete_function(x).graph
    matmuls = [op for op in graph.get_operations() if op.type == "MatMul"]
    assert len(matmuls) == 4  # fused QKV, attention output, MLP in, MLP out
    assert not [op for op in graph.get_operations() if op.type in ("Tensordot", "Einsum")]
    consumers = {}
    for op in graph.get_operations():
        for t in op.inputs:
            consumers.setdefault(t.op.name, []).append(op)
    for op in matmuls:
        assert op.inputs[0].shape.rank == 2
        (bias_add,) = consumers[op.name]
        assert bias_add.type == "BiasAdd"
    # tf.nn.gelu(approximate=False) on the MLP's BiasAdd: 0.5 * x * erfc(-x / sqrt(2))
    (erfc,) = [op for op in graph.get_operations() if op.type == "Erfc"]
    seen, frontier = set(), [erfc]
    while frontier:
        op = frontier.pop()
        seen.add(op.type)
        if op.type != "BiasAdd":
            frontier.extend(t.op for t in op.inputs)
    (mlp_in,) = [op for op in matmuls if op.outputs[0].shape[-1] == 32]
    assert consumers[mlp_in.name][0].name in {c.inputs[0].op.name for c in graph.get_operations() if c.type in ("Neg", "Mul")}


@pytest.mark.parametrize("dtype, rtol", [("float32", 1e-6), ("bfloat16", 2**-8)])
def test_gelu_with_gradient_equals_autodiff_of_tf_nn_gelu(dtype, rtol):
    # compared with float32 autodiff of tf.nn.gelu on the same (rounded) inputs: in bfloat16 the result
    # is that value rounded once (it is computed in float32), so within half an ulp plus rounding
    x = tf.cast(tf.constant(np.linspace(-6, 6, 241).astype("float32")), dtype)
    weights = tf.cast(tf.constant(_x(241)), dtype)

    def value_and_grad(fn, v, w):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = fn(v)
            loss = tf.reduce_sum(tf.cast(y * w, "float32"))
        return np.asarray(tf.cast(y, "float32")), np.asarray(tf.cast(tape.gradient(loss, v), "float32"))

    y, g = value_and_grad(kernels.gelu_with_gradient, x, weights)
    assert kernels.gelu_with_gradient(x).dtype == x.dtype
    y_ref, g_ref = value_and_grad(lambda v: tf.nn.gelu(v, approximate=False),
                                  tf.cast(x, "float32"), tf.cast(weights, "float32"))
    np.testing.assert_allclose(y, y_ref, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(g, g_ref, rtol=2 * rtol, atol=1e-6)


def test_block_gradients_in_training_equal_those_of_the_inference_graph():
    block = TransformerBlock(num_heads=2, mlp_dim=32)
    x = tf.constant(_x(2, 5, 16))
    block(x)
    grads = {}
    for training in (True, False):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x, training=training) * tf.constant(_x(2, 5, 16, seed=3)))
        grads[training] = tape.gradient(loss, block.trainable_variables)
    for a, b in zip(grads[True], grads[False]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
