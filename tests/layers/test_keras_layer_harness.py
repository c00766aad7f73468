"""Keras' own layer harness (``keras.src.testing.TestCase.run_layer_test``) on every public layer of keras_vit.layers.

For each layer the harness checks the config and serialisation round trips, ``build`` from a shape,
a symbolic call in a functional graph, an eager call, one compiled ``fit`` step
(``run_training_check``) and the output and weight dtypes under ``mixed_float16``
(``run_mixed_precision_check``); the counts of weights and seed generators are the real ones,
and the stateless layers are asserted built when created (so ``model.quantize`` finds them built).
"""

import keras
from absl.testing import parameterized
from keras.src import testing

from keras_vit.layers import PatchEncoder, Patches, SelfAttention, StochasticDepth, TokenGrid, TokenPooling, TransformerBlock
from keras_vit.layers.pooling import AttentionPooling
from keras_vit.layers.transformer import LayerScale

BATCH, TOKENS, WIDTH, HEADS = 2, 5, 8, 2
# _TRAINING_CHECK: the harness's fit step calls the layer without call_kwargs (one output) but takes its
# targets from the eager call with them (two outputs), so it cannot train with return_attention_scores=True;
# the same layers train in the cases without it, and every other check runs with it.


# the stateless layers: no weights, and built when created
STATELESS = dict(expected_num_trainable_weights=0, expected_num_non_trainable_weights=0, assert_built_after_instantiation=True)


class LayerHarnessTest(testing.TestCase):
    def setUp(self):
        self._filtering = keras.config.is_traceback_filtering_enabled()
        super().setUp()  # turns traceback filtering off for the whole process

    def tearDown(self):
        if self._filtering:
            keras.config.enable_traceback_filtering()
        super().tearDown()

    @parameterized.named_parameters(
        ("square", 2, True, (2, 4, 6, 3), (2, 6, 12)),
        ("pair", (2, 3), True, (2, 4, 6, 3), (2, 4, 18)),
        ("grid", (2, 3), False, (2, 4, 6, 3), (2, 2, 2, 18)),
    )
    def test_patches(self, patch_size, flatten, input_shape, output_shape):
        self.run_layer_test(
            Patches,
            {"patch_size": patch_size, "flatten": flatten},
            input_shape=input_shape,
            expected_output_shape=output_shape,
            expected_output_dtype="float32",
            expected_num_seed_generators=0,
            **STATELESS,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(
        ("class_token", True, 0.0, TOKENS + 1, 4, 0), ("gap_with_dropout", False, 0.1, TOKENS, 3, 1)
    )
    def test_patch_encoder(self, class_token, dropout, tokens, num_weights, num_seeds):
        self.run_layer_test(
            PatchEncoder,
            {"num_patches": TOKENS, "hidden_size": WIDTH, "class_token": class_token, "dropout": dropout},
            input_shape=(BATCH, TOKENS, 12),
            expected_output_shape=(BATCH, tokens, WIDTH),
            expected_output_dtype="float32",
            expected_num_trainable_weights=num_weights,  # projection kernel and bias, position embedding, [class]
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=num_seeds,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(
        # tokens: class + distillation + 4 registers; weights: projection (2), position embedding, 3 token weights
        ("registers_and_distillation", {"distillation_token": True, "num_register_tokens": 4}, TOKENS + 6, 6),
        ("no_prefix_positions", {"num_register_tokens": 2, "prefix_positions": False}, TOKENS + 3, 5),
        ("register_positions", {"num_register_tokens": 2, "register_positions": True}, TOKENS + 3, 5),
    )
    def test_patch_encoder_family_tokens(self, switches, tokens, num_weights):
        self.run_layer_test(
            PatchEncoder,
            {"num_patches": TOKENS, "hidden_size": WIDTH, **switches},
            input_shape=(BATCH, TOKENS, 12),
            expected_output_shape=(BATCH, tokens, WIDTH),
            expected_output_dtype="float32",
            expected_num_trainable_weights=num_weights,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    def test_patch_encoder_on_another_grid(self):
        self.run_layer_test(
            PatchEncoder,
            {"num_patches": 6, "hidden_size": WIDTH, "grid_size": (2, 3)},
            input_shape=(BATCH, 3, 4, 12),  # position embeddings resampled from 2 x 3 to 3 x 4
            expected_output_shape=(BATCH, 13, WIDTH),
            expected_output_dtype="float32",
            expected_num_trainable_weights=4,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(
        ("plain", 0.0, False, 0), ("dropout", 0.1, False, 1), ("scores", 0.0, True, 0), ("dropout_and_scores", 0.1, True, 1)
    )
    def test_self_attention(self, dropout, return_scores, num_seeds):
        outputs = (BATCH, TOKENS, WIDTH)
        self.run_layer_test(
            SelfAttention,
            {"num_heads": HEADS, "key_dim": WIDTH // HEADS, "dropout": dropout},
            input_shape=(BATCH, TOKENS, WIDTH),
            call_kwargs={"return_attention_scores": return_scores},
            expected_output_shape=(outputs, (BATCH, HEADS, TOKENS, TOKENS)) if return_scores else outputs,
            expected_num_trainable_weights=8,  # query, key, value, attention_output: kernel and bias each
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=num_seeds,
            run_training_check=not return_scores,  # see _TRAINING_CHECK
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(
        ("plain", {}, False, 0),
        # seeds: attention-weight dropout, attention-output dropout, MLP dropout, stochastic depth
        ("regularised", {"dropout": 0.1, "attention_dropout": 0.1, "drop_path": 0.1}, False, 4),
        ("scores", {}, True, 0),
        ("regularised_with_scores", {"dropout": 0.1, "attention_dropout": 0.1, "drop_path": 0.1}, True, 4),
    )
    def test_transformer_block(self, rates, return_scores, num_seeds):
        outputs = (BATCH, TOKENS, WIDTH)
        self.run_layer_test(
            TransformerBlock,
            {"num_heads": HEADS, "mlp_dim": 16, **rates},
            input_shape=(BATCH, TOKENS, WIDTH),
            call_kwargs={"return_attention_scores": return_scores},
            expected_output_shape=(outputs, (BATCH, HEADS, TOKENS, TOKENS)) if return_scores else outputs,
            # two LayerNorms (2 each), attention (8), two MLP Dense layers (2 each)
            expected_num_trainable_weights=16,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=num_seeds,
            run_training_check=not return_scores,  # see _TRAINING_CHECK
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(
        # LayerScale adds 2 gammas; a GLU MLP changes shapes only; no qkv bias drops 3 biases
        ("layer_scale_swiglu", {"layer_scale_init": 1e-5, "mlp_type": "glu", "activation": "silu"}, 18),
        ("quick_gelu_no_qkv_bias", {"activation": "quick_gelu", "qkv_bias": False}, 13),
        ("gelu_tanh", {"activation": "gelu_tanh"}, 16),
        ("res_post_norm", {"res_post_norm": True}, 16),  # the same two norms, after each branch
        ("parallel", {"parallel": True, "layer_scale_init": 1e-5}, 15),  # one norm, one LayerScale of both branches
        ("differential", {"differential_lambda_init": 0.2}, 21),  # four lambda vectors and the heads' RMSNorm
        ("parallel_differential", {"parallel": True, "differential_lambda_init": 0.5}, 19),  # vit_dpwee's block
    )
    def test_transformer_block_family_switches(self, switches, num_weights):
        self.run_layer_test(
            TransformerBlock,
            {"num_heads": HEADS, "mlp_dim": 16, **switches},
            input_shape=(BATCH, TOKENS, WIDTH),
            expected_output_shape=(BATCH, TOKENS, WIDTH),
            expected_num_trainable_weights=num_weights,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    def test_layer_scale(self):
        self.run_layer_test(
            LayerScale,
            {"init_value": 0.1},
            input_shape=(BATCH, TOKENS, WIDTH),
            expected_output_shape=(BATCH, TOKENS, WIDTH),
            expected_output_dtype="float32",
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(("bias", True, 13), ("no_qkv_bias", False, 10))
    def test_attention_pooling(self, qkv_bias, num_weights):
        self.run_layer_test(
            AttentionPooling,
            {"num_heads": HEADS, "mlp_dim": 16, "qkv_bias": qkv_bias, "activation": "gelu_tanh"},
            input_shape=(BATCH, TOKENS, WIDTH),
            expected_output_shape=(BATCH, WIDTH),
            expected_output_dtype="float32",
            # probe, query, key, value, attention_output (2 each), LayerNorm (2), MLP (4), less the 3 qkv biases
            expected_num_trainable_weights=num_weights + 2,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(("active", 0.2, 1), ("identity", 0.0, 0))
    def test_stochastic_depth(self, rate, num_seeds):
        self.run_layer_test(
            StochasticDepth,
            {"rate": rate, "seed": 1},
            input_shape=(BATCH, TOKENS, WIDTH),
            expected_output_shape=(BATCH, TOKENS, WIDTH),
            expected_output_dtype="float32",
            expected_num_non_trainable_variables=num_seeds,  # the seed generator's state
            expected_num_seed_generators=num_seeds,
            **STATELESS,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(
        ("token", "token", 0), ("gap", "gap", 0), ("distillation", "distillation", 0), ("gap_after_prefix", "gap", 3),
        ("max_after_prefix", "max", 3),
    )
    def test_token_pooling(self, mode, num_prefix_tokens):
        self.run_layer_test(
            TokenPooling,
            {"mode": mode, "num_prefix_tokens": num_prefix_tokens},
            input_shape=(BATCH, TOKENS, WIDTH),
            expected_output_shape=(BATCH, WIDTH),
            expected_output_dtype="float32",
            expected_num_seed_generators=0,
            **STATELESS,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    @parameterized.named_parameters(("class_token", 2, 1, (2, 3)), ("registers_pair", (1, 2), 3, (4, 3)))
    def test_token_grid(self, patch_size, num_prefix_tokens, grid):
        ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
        self.run_layer_test(
            TokenGrid,
            {"patch_size": patch_size, "num_prefix_tokens": num_prefix_tokens},
            input_shape=((BATCH, num_prefix_tokens + grid[0] * grid[1], WIDTH), (BATCH, grid[0] * ph, grid[1] * pw, 3)),
            expected_output_shape=(BATCH, *grid, WIDTH),
            expected_output_dtype="float32",
            expected_num_seed_generators=0,
            **STATELESS,
            run_training_check=True,
            run_mixed_precision_check=True,
        )
