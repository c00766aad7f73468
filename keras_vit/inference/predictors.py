"""Classify image files with a ``.keras``, SavedModel, ``.tflite`` or ``.onnx`` ViT.

``predict(model, images)`` reads image files or folders with the one reader
(:mod:`keras_vit.inference.images`, decoding and resizing with the function the
SavedModel's ``serving_bytes`` runs in its graph), resizes them to the model's
input size (a model of any size: its native size, or ``image_size=``),
runs whichever format it was given (:mod:`keras_vit.inference.runtimes`), and
returns the top-k classes of each image (of a model that returns an embedding, no classification head:
the embedding); ``preprocess_input`` and ``decode_predictions`` follow ``keras.applications``. A file or folder that
cannot be read (missing, not permitted, corrupt, too large to decode safely)
gets an error entry and the others are still classified.
"""

import os
import warnings

import keras
import numpy as np

from keras_vit import saving
from keras_vit.domains import check_arguments
from keras_vit.hardware import onednn
from keras_vit.inference import images as images_lib
from keras_vit.inference import labels as labels_lib
from keras_vit.inference import naflex_runtime
from keras_vit.inference import runtimes, tflite_files
from keras_vit.inference.options import PREDICT_DOMAINS


def preprocess_input(x, data_format=None, include_preprocessing=True):
    """Prepare RGB pixels in [0, 255] for a keras_vit model (``keras.applications`` style).

    keras_vit models scale [0, 255] to [-1, 1] themselves (``include_preprocessing=True``,
    the default of every builder), so by default this only casts to float32,
    like ``keras.applications.convnext.preprocess_input``. For a model built with
    ``include_preprocessing=False`` pass the same flag here to get [-1, 1].

    Args:
        x: array of shape ``(..., H, W, 3)`` (or ``(..., 3, H, W)`` with
            ``data_format="channels_first"``), RGB in [0, 255].
        data_format: accepted for ``keras.applications`` compatibility; the
            scaling is elementwise so the layout does not matter.
        include_preprocessing: whether the model scales its inputs itself.

    Returns:
        A float32 array of the same shape.

    Example:
    >>> preprocess_input(np.array([0.0, 255.0]), include_preprocessing=False)
    array([-1.,  1.], dtype=float32)
    """
    if data_format not in (None, "channels_last", "channels_first"):
        raise ValueError(
            f"Unknown data_format: expected 'channels_last' or 'channels_first'. Received: data_format={data_format!r}"
        )
    return np.asarray(x, dtype="float32") if include_preprocessing else runtimes.unit_range(x)


def decode_predictions(preds, top=5, class_names=None, model=None):
    """Top classes of a batch of predictions (``keras.applications`` style).

    Args:
        preds: ``(batch, num_classes)`` probabilities (or logits).
        top: how many classes per sample.
        class_names: None, a list of names, or the path to a label file.
        model: the model that made ``preds`` (a Keras model, a :class:`Predictor`): its stored
            names (``model.class_names``, set by :func:`keras_vit.load_model` from a ``.keras`` saved by
            ``keras-vit train``, and by :func:`keras_vit.from_pretrained`) when ``class_names`` is None.
            Without either: the ImageNet-1k/-21k names for 1000/21843 classes, else ``class_i``.

    Returns:
        One list per sample of ``(class_id, class_name, score)`` tuples, best
        first; ``class_id`` is the WordNet id for ImageNet heads, else the
        class index as a string.

    Raises:
        ValueError: ``preds`` is not 2-D, or ``model`` returns no class scores (an embedding, tokens).

    Example:
    >>> decode_predictions(np.array([[0.1, 0.7, 0.2]]), top=2)
    [[('1', 'class_1', 0.7), ('2', 'class_2', 0.2)]]
    >>> import types
    >>> decode_predictions(np.array([[0.1, 0.7, 0.2]]), top=1, model=types.SimpleNamespace(class_names=["a", "b", "c"]))
    [[('1', 'b', 0.7)]]
    """
    preds = np.asarray(preds)
    if preds.ndim != 2:
        raise ValueError(f"`decode_predictions` expects a batch of predictions (2-D). Received: shape={preds.shape}")
    output = getattr(getattr(model, "vit_config", None), "output", None)
    output = runtimes.EMBEDDING if getattr(model, "embedding", False) else output  # a Predictor's
    if output not in (None, "probabilities", "logits"):  # an embedding's dimensions are no classes
        raise ValueError(f"`decode_predictions` decodes class scores; the model returns {output!r} (it has no "
                         f"classification head). Received: preds of shape {preds.shape}")
    num_classes = preds.shape[1]
    names = labels_lib.class_names(num_classes, labels=class_names, loaded=model)
    ids = labels_lib.class_ids(num_classes)
    results = []
    for row in preds:
        order = np.argsort(-row, kind="stable")[:top]
        results.append([(ids[i], names[i], float(row[i])) for i in order])
    return results


def softmax(x):
    """Softmax over the last axis, in float64.

    Example:
    >>> softmax(np.log([[1.0, 3.0]]))
    array([[0.25, 0.75]])
    """
    x = np.asarray(x, dtype="float64")
    exp = np.exp(x - x.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def to_probabilities(outputs, atol=1e-3, output=None):
    """Class probabilities of a model's ``outputs``: as they are where its ``output`` is ``"probabilities"`` (a softmax
    or sigmoid head), through a :func:`softmax` where it is ``"logits"``; where the model does not say (None), as they
    are when each row is in [0, 1] and sums to 1 within ``atol``, else through a softmax.

    Example:
    >>> to_probabilities([[0.9, 0.8]], output="probabilities")  # a sigmoid head's: each class's own
    array([[0.9, 0.8]])
    >>> to_probabilities([[0.9, 0.8]]).round(3)  # unsaid: logits
    array([[0.525, 0.475]])
    """
    outputs = np.asarray(outputs, dtype="float64")
    if output == "probabilities" or (output is None and np.all(outputs >= 0) and np.allclose(outputs.sum(-1), 1.0, atol=atol)):
        return outputs
    return softmax(outputs)


class Predictor:
    """One loaded model of any supported format, callable on RGB batches in [0, 255].

    Build with :func:`load_predictor`. Attributes: ``format``, ``path``,
    ``image_size`` ``(h, w)``, ``num_classes`` (the output's width: classes, or the embedding's size),
    ``class_names`` (None for an embedding), ``embedding`` (whether the model returns an embedding, not
    class scores: :attr:`keras_vit.ViTConfig.output`), ``model`` (the loaded object), ``runtime`` (its
    :class:`~keras_vit.inference.runtimes.Runtime`).
    """

    def __init__(self, runtime, model_format, path=None, *, labels=None, naflex=None):
        self.runtime = runtime
        self.naflex = naflex  # a NaFlex model: (patch_size, max_patches); it takes images of any shape
        self.format = model_format
        self.path = path
        self.image_size = tuple(int(v) for v in runtime.image_size)
        self.num_classes = int(runtime.num_classes)
        self.model = runtime.loaded
        self.embedding = runtime.output == runtimes.EMBEDDING
        if self.embedding and labels is not None:
            raise ValueError(
                f"The model {path or getattr(self.model, 'name', '')!r} returns a {self.num_classes}-value embedding "
                "(no classification head), not class scores: it has no classes to label. Drop labels= (--labels)."
            )
        self.class_names = None if self.embedding else labels_lib.class_names(
            self.num_classes, labels=labels, model_path=path, loaded=self.model
        )

    def __call__(self, images):
        """``(batch, h, w, 3)`` RGB in [0, 255] -> ``(batch, num_classes)`` probabilities (an embedding as it is).

        A NaFlex model takes a list of images of any shapes (each at its own aspect ratio, by the grid rule)."""
        if self.naflex is not None:
            outputs = self.runtime.run([np.asarray(image, dtype="float32") for image in images])
            return np.asarray(outputs, "float32") if self.embedding else to_probabilities(outputs, self.runtime.atol, self.runtime.output)
        images = np.asarray(images, dtype="float32")
        if images.shape[1:3] != self.image_size:
            raise ValueError(f"Expected images of size {self.image_size}. Received: shape={images.shape}")
        x = preprocess_input(images, include_preprocessing=self.runtime.takes_pixels)
        outputs = self.runtime.run(x)
        if self.embedding:  # never a softmax over embedding dimensions
            return np.asarray(outputs, dtype="float32")
        return to_probabilities(outputs, self.runtime.atol, self.runtime.output)


_ADVISED = []


def _advise_onednn():
    """Warn once per process when TensorFlow runs this CPU without oneDNN (keras_vit.hardware.onednn.onednn_notice)."""
    if _ADVISED:
        return
    _ADVISED.append(True)
    notice = onednn.onednn_notice()
    if notice:
        warnings.warn(notice, stacklevel=3)


def load_predictor(model, labels=None, include_preprocessing=None, image_size=None, max_patches=None):
    """Load a model for :func:`predict`: a ``keras.Model``, or a path to a ``.keras``/SavedModel/``.tflite``.

    Args:
        model: the model or its path.
        labels: class names (list or label file); None looks them up (see
            :mod:`keras_vit.inference.labels`).
        include_preprocessing: whether the model takes [0, 255] pixels (True)
            or [-1, 1] (False). None: Keras models are asked (a
            ``preprocessing`` layer), SavedModel and TFLite files are assumed
            to take [0, 255] as keras_vit exports them.
        image_size: ``(H, W)`` (or an int) to classify images at, for a model of any size
            (``image_size=None``) or its SavedModel; default its native size (for a SavedModel, the
            size keras_vit's export recorded, what its ``serving_bytes`` resizes to). A fixed-size
            model takes only its own size: another is refused, naming both.
        max_patches: a NaFlex model's budget of patches per image (:mod:`keras_vit.inference.naflex_runtime`): its
            ``.keras`` file and its SavedModel take each image at its own aspect ratio, no crop, under it; its
            ``.tflite`` file has the budget it was exported at (another is refused). A positive int; refused for a
            model that is not a NaFlex model (it takes images of one size: ``image_size``).
    """
    max_patches = check_arguments(PREDICT_DOMAINS, max_patches=max_patches)["max_patches"]
    if isinstance(model, Predictor):
        if image_size is not None:
            runtimes.input_size(model.image_size, image_size)  # a loaded predictor keeps its size
        if max_patches is not None and (model.naflex is None or model.naflex[1] != max_patches):
            _refuse_max_patches(model.path or getattr(model.model, "name", ""), model.naflex, max_patches)
        return model
    naflex = None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        kind = runtimes.model_format(path)
        loaded = saving.load_model(path) if kind == "keras" else None
        if kind == "keras" and naflex_runtime.is_naflex(loaded):
            runtime, naflex = naflex_runtime.keras_runtime(loaded, include_preprocessing, max_patches)
        elif kind == "tflite" and naflex_runtime.tflite_inputs(tflite_files.tflite_interpreter(path)) is not None:
            runtime, naflex = naflex_runtime.tflite_runtime(path, include_preprocessing, max_patches)
        elif kind == "saved_model" and naflex_runtime.is_naflex_saved_model(path):
            runtime, naflex = naflex_runtime.saved_model_runtime(path, include_preprocessing, max_patches)
        elif kind == "keras":
            runtime = runtimes.keras_runtime(loaded, include_preprocessing, image_size)
        elif kind == "saved_model":
            runtime = runtimes.saved_model_runtime(path, include_preprocessing, image_size)
        elif kind == "onnx":
            runtime = runtimes.onnx_runtime(path, include_preprocessing, image_size)
        else:
            runtime = tflite_files.tflite_runtime(path, include_preprocessing, image_size)
    elif naflex_runtime.is_naflex(model):
        path, kind = None, "keras"
        runtime, naflex = naflex_runtime.keras_runtime(model, include_preprocessing, max_patches)
    else:
        path, kind = None, "keras"
        runtime = runtimes.keras_runtime(model, include_preprocessing, image_size)
    if naflex is None and max_patches is not None:
        _refuse_max_patches(path or getattr(model, "name", ""), None, max_patches)
    if naflex is not None and image_size is not None:
        raise ValueError(
            f"The NaFlex model {path or getattr(model, 'name', '')!r} takes each image at its own size and aspect "
            f"ratio under a budget of patches: it has no image size to classify at. Drop image_size= (--image-size); "
            f"max_patches= (--max-patches) sets the budget. Received: image_size={image_size!r}")
    # after loading (a SavedModel starts TensorFlow under another backend): what runs on TensorFlow's kernels,
    # a Keras model under the TensorFlow backend and a SavedModel, gets the oneDNN advice
    if kind == "saved_model" or (kind == "keras" and keras.backend.backend() == "tensorflow"):
        _advise_onednn()
    return Predictor(runtime, kind, path, labels=labels, naflex=naflex)


def _refuse_max_patches(what, naflex, max_patches):
    if naflex is not None:  # a loaded NaFlex predictor keeps its budget
        raise ValueError(f"The NaFlex predictor of {what!r} was loaded at max_patches={naflex[1]} patches per image; "
                         f"load it again at another. Received: max_patches={max_patches!r}")
    raise ValueError(
        f"max_patches (keras-vit predict --max-patches) is a NaFlex model's budget of patches per image; {what!r} is "
        f"not a NaFlex model: it takes images of one size (image_size=, --image-size). Received: max_patches={max_patches!r}")


def predict(model, images, top_k=5, *, labels=None, batch_size=16, include_preprocessing=None, image_size=None,
            max_patches=None):
    """Top-k classes of image files with any supported model format.

    Args:
        model: a ``keras.Model``, a path to a ``.keras`` file, a SavedModel
            folder or a ``.tflite`` file, or a :class:`Predictor`.
        images: a path or list of paths to image files or folders of images.
        top_k: classes reported per image.
        labels: class names (list or label file); default: stored with the
            model, ImageNet for 1000/21843 classes, else ``class_i``.
        batch_size: images per forward pass.
        include_preprocessing, image_size, max_patches: see :func:`load_predictor`. A NaFlex model reads each
            image at its own size and aspect ratio (no crop, no resize to a square).

    Returns:
        One dict per image file, in order: ``{"path", "predictions": [{"index",
        "label", "probability"}, ...]}``, or ``{"path", "error"}`` for a file
        that could not be read. A model that returns an embedding (no classification head, e.g. a
        CLIP-like model with a projection, :attr:`keras_vit.ViTConfig.output`) has no classes:
        ``{"path", "embedding": [float, ...]}`` instead of ``"predictions"`` (``top_k`` does not apply;
        ``labels`` is refused).

    Example:
    >>> import tempfile
    >>> import keras_vit
    >>> from PIL import Image
    >>> folder = tempfile.mkdtemp()
    >>> Image.new("RGB", (64, 48), (200, 30, 30)).save(os.path.join(folder, "red.png"))
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
    ...                       num_classes=3)
    >>> (result,) = predict(model, [folder], top_k=2, labels=["ant", "bee", "cat"])
    >>> os.path.basename(result["path"]), len(result["predictions"]), sorted(result["predictions"][0])
    ('red.png', 2, ['index', 'label', 'probability'])
    """
    top_k, batch_size = check_arguments(PREDICT_DOMAINS, top_k=top_k, batch_size=batch_size).values()
    predictor = load_predictor(model, labels=labels, include_preprocessing=include_preprocessing, image_size=image_size,
                               max_patches=max_patches)
    top_k = min(int(top_k), predictor.num_classes)
    results = []
    pending = []  # (result, image) waiting for a batch

    def flush():
        if not pending:
            return
        images = [image for _, image in pending]
        probs = predictor(images if predictor.naflex else np.stack(images))
        for (result, _), row in zip(pending, probs):
            if predictor.embedding:
                result["embedding"] = [float(v) for v in row]
                continue
            order = np.argsort(-row, kind="stable")[:top_k]
            result["predictions"] = [
                {"index": int(i), "label": predictor.class_names[i], "probability": float(row[i])} for i in order
            ]
        pending.clear()

    for item in [images] if isinstance(images, (str, os.PathLike)) else images:
        try:
            paths = images_lib.list_images(item)
        except (OSError, ValueError) as error:  # a folder without images, or one we may not list: reported
            results.append({"path": os.fspath(item), "error": str(error)})
            continue
        for path in paths:
            result = {"path": path}
            results.append(result)
            try:
                image = images_lib.load_image(path, None if predictor.naflex else predictor.image_size)
            except (OSError, ValueError) as error:
                result["error"] = str(error)
                continue
            pending.append((result, image))
            if len(pending) >= batch_size:
                flush()
    flush()
    return results
