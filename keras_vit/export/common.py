"""Shared pieces of the exporters: the model's input shape and outputs, labels, sizes (formats and modes: :mod:`~keras_vit.export.options`)."""

import os

import keras

from keras_vit.architecture.model import config_of
from keras_vit.export.options import FORMATS, QUANTIZE_MODES, check_format, check_quantize  # noqa: F401 (the shared names)
from keras_vit.inference import labels as labels_lib
from keras_vit.inference import runtimes


def image_shape(model):
    """``(height, width, channels)`` of a single-input image model, all static."""
    shape = tuple(model.input_shape)
    if len(model.inputs) != 1 or len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            f"Export needs one image input of static shape (batch, H, W, C). Received: input_shape={model.input_shape}"
        )
    return shape[1:]


def num_outputs(model):
    """Width of the model's ``(batch, n)`` output: classes, or the size of an embedding."""
    shape = tuple(model.output_shape)
    if len(shape) != 2 or shape[1] is None:
        kind = output_kind(model)
        gives = f" (the model gives {kind}: include_top=False with pooling=None or 'feature_map')" if kind in ("tokens", "feature_map") else ""
        raise ValueError(
            f"Export needs a (batch, classes) or (batch, embedding) output{gives}. Received: output_shape={model.output_shape}"
        )
    return shape[1]


def output_kind(model):
    """What ``model`` returns, the name its export gives the output: ``"probabilities"``, ``"logits"``, ``"embedding"``...

    A keras_vit model says it in its config (:attr:`keras_vit.ViTConfig.output`: no head is an embedding); another
    Keras model is a classifier, of probabilities if it ends in a softmax, else of logits.
    """
    try:
        return config_of(model).output
    except ValueError:  # a Keras model that is no keras_vit model
        return "probabilities" if outputs_are_probabilities(model) else "logits"


def is_embedding(model):
    """The model returns an embedding, not class scores: no labels, no softmax, no top-k in its exports."""
    return output_kind(model) == "embedding"


def outputs_are_probabilities(model):
    """True when the model ends in a softmax (the ViT default) or a sigmoid (each class's probability), False for logits."""
    last = model.layers[-1]
    activation = last.activation if isinstance(last, keras.layers.Activation) else getattr(last, "activation", None)
    return getattr(activation, "__name__", "") in ("softmax", "sigmoid")


def resolve_labels(model, labels=None, model_path=None):
    """Class names as predict finds them (:func:`keras_vit.inference.labels.class_names`); None for an embedding.

    Labels given for a model that returns an embedding are refused: it has no classes to name.
    """
    if is_embedding(model):
        if labels is not None:
            raise ValueError(
                f"Model {model.name!r} returns a {num_outputs(model)}-value embedding (no classification head), not "
                "class scores: it has no classes to label. Drop labels= (--labels)."
            )
        return None
    return labels_lib.class_names(num_outputs(model), labels=labels, model_path=model_path, loaded=model)


def file_size(path):
    """Bytes of a file, or of every file under a directory."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)


def keras_reference(model, images, batch_size=32):
    """The Keras model's outputs on the verification images, as NumPy: one eager call where that beats tracing a
    predict step (:func:`keras_vit.inference.runtimes.one_eager_batch`), else ``model.predict``."""
    if runtimes.one_eager_batch(model, len(images), batch_size):
        return runtimes.eager_outputs(model, images)
    return model.predict(images, batch_size=batch_size, verbose=0)
