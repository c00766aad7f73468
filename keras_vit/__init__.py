"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2020) for Keras 3."""

__version__ = "0.1.0"

import os as _os
import sys as _sys

# TensorFlow's C++ start-up chatter (CUDA probing, oneDNN notices) drowns the
# command line's output; users can still set their own level.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _import_tensorflow_quietly():
    """For the ``keras-vit`` command only: import TensorFlow with file descriptor 2 sent to /dev/null.

    TensorFlow 2.21 writes its start-up lines (oneDNN, CUDA probing) before absl's
    logging is initialised, so TF_CPP_MIN_LOG_LEVEL does not silence them.
    ``TF_CPP_MIN_LOG_LEVEL=0`` (or 1) shows them again; an import error is still
    raised, with stderr restored first.
    """
    if _os.path.basename(_sys.argv[0] if _sys.argv else "") != "keras-vit":
        return
    if _os.environ.get("TF_CPP_MIN_LOG_LEVEL") in ("0", "1") or "tensorflow" in _sys.modules:
        return
    try:
        _sys.stderr.flush()
        saved = _os.dup(2)
        devnull = _os.open(_os.devnull, _os.O_WRONLY)
    except OSError:
        return
    try:
        _os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        _os.dup2(saved, 2)
        _os.close(saved)
        _os.close(devnull)


_import_tensorflow_quietly()

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
