"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2020) for Keras 3."""

__version__ = "0.1.0"

import os as _os

# TensorFlow's C++ start-up chatter (CUDA probing, oneDNN notices) drowns the
# command line's output; users can still set their own level.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_vit.checkpoints import CheckpointError, LoadReport, load_checkpoint, read_checkpoint, resize_position_embedding
from keras_vit.configs import count_params, decode_variant
from keras_vit.layers import PatchEncoder, Patches, SelfAttention, StochasticDepth, TokenPooling, TransformerBlock
from keras_vit.models import ViT, ViTB16, ViTB32, ViTH14, ViTL16, ViTL32, ViTS16, ViTS32, ViTTi16
from keras_vit.attention import (
    attention_model,
    attention_rollout,
    attention_weights,
    mean_attention_distance,
    position_embedding_similarity,
    rollout_map,
)
from keras_vit.features import feature_model, forward_features
from keras_vit.inference import decode_predictions, load_image, load_predictor, predict, preprocess_input
from keras_vit.labels import imagenet_labels
from keras_vit.hybrid import HybridViT, R26ViTS32, count_hybrid_params, R50ViTB16, R50ViTL32, ResidualUnit, StdConv2D
from keras_vit.export import ExportError, ExportVerificationError, VerificationReport, export_model
from keras_vit.data import ImageDataset, load_dataset, load_image_folder, load_mnist, load_tfds, make_pipeline
from keras_vit.training import (
    Backup,
    LayerDecayAdamW,
    LayerDecaySGD,
    build_optimizer,
    fit_resumable,
    freeze,
    layer_decay_multipliers,
    set_precision,
    warmup_cosine,
)
from keras_vit.distribute import DistributedTrainer
from keras_vit.recipes import conv_stem_vit
