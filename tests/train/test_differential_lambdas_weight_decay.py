"""Differential attention's lambda vectors (``lambda_q1``, ``lambda_k1``, ``lambda_q2``, ``lambda_k2``: 1-D, as timm's
DiffAttention keeps them) are left out of weight decay, as every other 1-D weight is (timm's
``param_groups_weight_decay`` excludes ``ndim <= 1``): ``build_optimizer`` decayed them toward 0, which moves
``lambda = exp(q1 . k1) - exp(q2 . k2) + lambda_init`` toward ``lambda_init`` whatever the loss says."""

import keras_vit


def test_lambdas_are_not_decayed_and_kernels_are():
    model = keras_vit.build_model(keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
                                                      mlp_dim=64, num_classes=3, differential_attention=True))
    optimizer = keras_vit.build_optimizer(1e-3, 10, model=model)
    optimizer.build(model.trainable_variables)
    decayed = {v.path: optimizer._use_weight_decay(v) for v in model.trainable_variables}
    lambdas = [path for path in decayed if "/lambda_" in path]
    assert len(lambdas) == 8  # four per block
    assert not any(decayed[path] for path in lambdas), {path: decayed[path] for path in lambdas}
    assert decayed["transformer_block_0/attention/query/kernel"] and decayed["transformer_block_0/mlp_dense_1/kernel"]
    assert not decayed["transformer_block_0/attention/sub_norm/gamma"]
