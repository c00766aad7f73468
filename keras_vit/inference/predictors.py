"""Classify image files with a ``.keras``, SavedModel or ``.tflite`` ViT.

``predict(model, images)`` reads JPEG/PNG files or folders, resizes them to the
model's input size, runs whichever format it was given, and returns the top-k
classes of each image; ``preprocess_input`` and ``decode_predictions`` follow
``keras.applications``. A file that cannot be read gets an error entry and the
others are still classified.
"""

import os

import numpy as np

from keras_vit.inference import labels as labels_lib

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
FORMATS = ("keras", "saved_model", "tflite")


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
    x = np.asarray(x, dtype="float32")
    if include_preprocessing:
        return x
    return x / np.float32(127.5) - np.float32(1.0)


def decode_predictions(preds, top=5, class_names=None):
    """Top classes of a batch of predictions (``keras.applications`` style).

    Args:
        preds: ``(batch, num_classes)`` probabilities (or logits).
        top: how many classes per sample.
        class_names: None (ImageNet-1k/-21k names for 1000/21843 classes,
            else ``class_i``), a list of names, or the path to a label file.

    Returns:
        One list per sample of ``(class_id, class_name, score)`` tuples, best
        first; ``class_id`` is the WordNet id for ImageNet heads, else the
        class index as a string.

    Example:
    >>> decode_predictions(np.array([[0.1, 0.7, 0.2]]), top=2)
    [[('1', 'class_1', 0.7), ('2', 'class_2', 0.2)]]
    """
    preds = np.asarray(preds)
    if preds.ndim != 2:
        raise ValueError(f"`decode_predictions` expects a batch of predictions (2-D). Received: shape={preds.shape}")
    num_classes = preds.shape[1]
    names = labels_lib.class_names(num_classes, labels=class_names)
    ids = labels_lib.class_ids(num_classes)
    results = []
    for row in preds:
        order = np.argsort(-row, kind="stable")[:top]
        results.append([(ids[i], names[i], float(row[i])) for i in order])
    return results


def load_image(path, image_size=None):
    """Read an image file as RGB float32 in [0, 255], optionally resized to ``(h, w)``.

    Grayscale, palette and CMYK images are converted to RGB; transparent pixels
    of RGBA/LA images are composited onto white; EXIF rotation is applied.
    Resizing is bilinear to exactly ``image_size`` (no crop), as in the ViT
    fine-tuning evaluation.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such file: {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Expected an image file, got a folder: {path!r}")
    try:
        with Image.open(path) as image:
            image.load()
            image = ImageOps.exif_transpose(image)
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise ValueError(f"Not a readable image (JPEG, PNG, ...): {path!r} ({error})") from None
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        image = image.convert("RGBA")
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, image)
    image = image.convert("RGB")
    if image_size is not None:
        h, w = image_size
        if image.size != (w, h):
            image = image.resize((w, h), Image.BILINEAR)
    return np.asarray(image, dtype="float32")


def collect_images(inputs):
    """Expand folders into their image files (sorted, not recursive); files are kept as given.

    Paths that do not exist are kept too, so the caller reports them per file.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = []
    for item in inputs:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(
                os.path.join(item, name)
                for name in os.listdir(item)
                if name.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(item, name))
            )
            if not found:
                paths.append(item)  # reported as an error: an empty folder is probably a mistake
            paths.extend(found)
        else:
            paths.append(item)
    return paths


def model_format(path):
    """``"keras"``, ``"saved_model"`` or ``"tflite"`` from a model path."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "saved_model.pb")):
            return "saved_model"
        raise ValueError(f"Folder is not a SavedModel (no saved_model.pb): {path!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Model not found: {path!r}")
    if path.endswith(".keras"):
        return "keras"
    if path.endswith(".tflite"):
        return "tflite"
    raise ValueError(
        f"Unknown model format: expected a .keras file, a .tflite file or a SavedModel folder. Received: {path!r}"
    )


def _to_probabilities(outputs, atol=1e-3):
    """Probabilities as they are (rows in [0, 1] summing to 1 within ``atol``); logits through a softmax."""
    outputs = np.asarray(outputs, dtype="float64")
    if np.all(outputs >= 0) and np.allclose(outputs.sum(-1), 1.0, atol=atol):
        return outputs
    exp = np.exp(outputs - outputs.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


class Predictor:
    """One loaded model of any supported format, callable on RGB batches in [0, 255].

    Build with :func:`load_predictor`. Attributes: ``format``, ``path``,
    ``image_size`` ``(h, w)``, ``num_classes``, ``class_names``, ``model`` (the
    loaded object).
    """

    def __init__(self, run, model_format, path, image_size, num_classes, model, labels=None, atol=1e-3):
        self._run = run
        self._atol = atol  # how far from 1 a row of probabilities may sum (quantised outputs)
        self.format = model_format
        self.path = path
        self.image_size = tuple(int(v) for v in image_size)
        self.num_classes = int(num_classes)
        self.model = model
        self.class_names = labels_lib.class_names(self.num_classes, labels=labels, model_path=path, loaded=model)

    def __call__(self, images):
        """``(batch, h, w, 3)`` RGB in [0, 255] -> ``(batch, num_classes)`` probabilities."""
        images = np.asarray(images, dtype="float32")
        if images.shape[1:3] != self.image_size:
            raise ValueError(f"Expected images of size {self.image_size}. Received: shape={images.shape}")
        return _to_probabilities(self._run(images), self._atol)


def model_takes_pixels(model):
    """Whether a Keras model scales [0, 255] pixels itself (it has the ``preprocessing`` layer)."""
    try:
        model.get_layer("preprocessing")
        return True
    except ValueError:
        return False


_CHUNK = 32  # images per predict_on_batch call of a Keras predictor


def _keras_predictor(model, path, labels, include_preprocessing):
    if include_preprocessing is None:
        include_preprocessing = model_takes_pixels(model)
    shape = model.input_shape
    if isinstance(shape, list):
        raise ValueError(f"Expected a model with one image input. Received: input_shape={shape}")

    def run(images):
        # predict_on_batch per chunk, not model.predict: on 2 CPU cores model.predict ran ViT-B/16 at 3.1
        # instead of 5.6 img/s in some calls (a tf.data iterator per call); predict_on_batch stayed at 5.7
        images = preprocess_input(images, include_preprocessing=include_preprocessing)
        chunks = [model.predict_on_batch(images[i : i + _CHUNK]) for i in range(0, len(images), _CHUNK)]
        return np.concatenate(chunks, axis=0) if chunks else np.zeros((0, model.output_shape[-1]), "float32")

    return Predictor(run, "keras", path, shape[1:3], model.output_shape[-1], model, labels)


def _saved_model_predictor(path, labels, include_preprocessing):
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    signatures = dict(loaded.signatures)
    if not signatures:
        raise ValueError(f"SavedModel has no serving signature: {path!r}")
    signature = signatures.get("serving_default") or next(iter(signatures.values()))
    inputs = signature.structured_input_signature[1]
    if len(inputs) != 1:
        raise ValueError(f"Expected a SavedModel signature with one image input. Received inputs: {sorted(inputs)}")
    input_name, spec = next(iter(inputs.items()))
    if spec.shape.rank != 4 or spec.shape[1] is None or spec.shape[2] is None:
        raise ValueError(f"Expected a (batch, height, width, 3) image input. Received: {input_name}: {spec.shape}")
    outputs = {
        name: out
        for name, out in signature.structured_outputs.items()
        if out.dtype.is_floating and out.shape.rank == 2
    }
    if not outputs:
        raise ValueError(f"SavedModel signature has no (batch, classes) output: {sorted(signature.structured_outputs)}")
    # the class scores: "probabilities" if named so, else the widest float output that is not a top-k
    output_name = sorted(outputs, key=lambda n: (n != "probabilities", "top_k" in n, -(outputs[n].shape[-1] or 0), n))[0]
    fixed_batch = spec.shape[0]
    scale = include_preprocessing is False

    def run(images):
        images = preprocess_input(images, include_preprocessing=not scale)
        step = fixed_batch or len(images)
        chunks = [images[i : i + step] for i in range(0, len(images), step)]
        result = [signature(**{input_name: tf.constant(c, dtype=spec.dtype)})[output_name].numpy() for c in chunks]
        return np.concatenate(result)

    return Predictor(run, "saved_model", path, spec.shape[1:3], outputs[output_name].shape[-1], loaded, labels)


def _tflite_predictor(path, labels, include_preprocessing):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    interpreter.allocate_tensors()
    (input_detail,) = interpreter.get_input_details()
    output_details = interpreter.get_output_details()
    output_detail = max(output_details, key=lambda d: int(d["shape"][-1]))
    _, h, w, _ = input_detail["shape"]
    if input_detail["shape"][0] != 1:
        interpreter.resize_tensor_input(input_detail["index"], [1, h, w, 3])
        interpreter.allocate_tensors()
    scale = include_preprocessing is False

    def quantize(x, detail):
        in_scale, zero_point = detail["quantization"]
        if np.issubdtype(detail["dtype"], np.integer) and in_scale:
            info = np.iinfo(detail["dtype"])
            x = np.clip(np.round(x / in_scale + zero_point), info.min, info.max)
        return x.astype(detail["dtype"])

    def run(images):
        images = preprocess_input(images, include_preprocessing=not scale)
        out = []
        for image in images:
            interpreter.set_tensor(input_detail["index"], quantize(image[None], input_detail))
            interpreter.invoke()
            y = interpreter.get_tensor(output_detail["index"]).astype("float32")
            out_scale, zero_point = output_detail["quantization"]
            if np.issubdtype(output_detail["dtype"], np.integer) and out_scale:
                y = (y - zero_point) * out_scale
            out.append(y[0])
        return np.stack(out)

    num_classes = int(output_detail["shape"][-1])
    out_scale = output_detail["quantization"][0] if np.issubdtype(output_detail["dtype"], np.integer) else 0.0
    atol = max(1e-3, num_classes * out_scale)  # each dequantised score is off by up to one step
    return Predictor(run, "tflite", path, (h, w), num_classes, None, labels, atol=atol)


def load_predictor(model, labels=None, include_preprocessing=None):
    """Load a model for :func:`predict`: a ``keras.Model``, or a path to a ``.keras``/SavedModel/``.tflite``.

    Args:
        model: the model or its path.
        labels: class names (list or label file); None looks them up (see
            :mod:`keras_vit.inference.labels`).
        include_preprocessing: whether the model takes [0, 255] pixels (True)
            or [-1, 1] (False). None: Keras models are asked (a
            ``preprocessing`` layer), SavedModel and TFLite files are assumed
            to take [0, 255] as keras_vit exports them.
    """
    if isinstance(model, Predictor):
        return model
    if not isinstance(model, (str, os.PathLike)):
        return _keras_predictor(model, None, labels, include_preprocessing)
    path = os.fspath(model)
    kind = model_format(path)
    if kind == "keras":
        import keras

        import keras_vit.registry  # noqa: F401  (registers the layers for loading)

        return _keras_predictor(keras.saving.load_model(path), path, labels, include_preprocessing)
    if kind == "saved_model":
        return _saved_model_predictor(path, labels, include_preprocessing)
    return _tflite_predictor(path, labels, include_preprocessing)


def predict(model, images, top_k=5, labels=None, batch_size=16, include_preprocessing=None):
    """Top-k classes of image files with any supported model format.

    Args:
        model: a ``keras.Model``, a path to a ``.keras`` file, a SavedModel
            folder or a ``.tflite`` file, or a :class:`Predictor`.
        images: a path or list of paths to image files or folders of images.
        top_k: classes reported per image.
        labels: class names (list or label file); default: stored with the
            model, ImageNet for 1000/21843 classes, else ``class_i``.
        batch_size: images per forward pass.
        include_preprocessing: see :func:`load_predictor`.

    Returns:
        One dict per image file, in order: ``{"path", "predictions": [{"index",
        "label", "probability"}, ...]}``, or ``{"path", "error"}`` for a file
        that could not be read.

    Example:
    >>> keras_vit.predict("model.keras", ["cat.jpg", "photos/"], top_k=3)  # doctest: +SKIP
    """
    if int(top_k) < 1:
        raise ValueError(f"`top_k` must be a positive int. Received: top_k={top_k!r}")
    predictor = load_predictor(model, labels=labels, include_preprocessing=include_preprocessing)
    top_k = min(int(top_k), predictor.num_classes)
    results = []
    pending = []  # (result, image) waiting for a batch

    def flush():
        if not pending:
            return
        probs = predictor(np.stack([image for _, image in pending]))
        for (result, _), row in zip(pending, probs):
            order = np.argsort(-row, kind="stable")[:top_k]
            result["predictions"] = [
                {"index": int(i), "label": predictor.class_names[i], "probability": float(row[i])} for i in order
            ]
        pending.clear()

    for path in collect_images(images):
        result = {"path": path}
        results.append(result)
        if os.path.isdir(path):
            result["error"] = f"No image files ({', '.join(IMAGE_EXTENSIONS)}) in folder: {path!r}"
            continue
        try:
            image = load_image(path, predictor.image_size)
        except (OSError, ValueError) as error:
            result["error"] = str(error)
            continue
        pending.append((result, image))
        if len(pending) >= batch_size:
            flush()
    flush()
    return results
