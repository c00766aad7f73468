"""SavedModel for TF Serving: versioned, atomic, with a pixels and a bytes signature.

Layout: ``<base>/<name>/<version>/`` (what ``--model_base_path`` polls). The
version is built in a hidden temporary folder beside it, verified, then
renamed into place, so a polling server never sees half a version; an
existing version is never overwritten.

Signatures (both with a dynamic batch):

* ``serving_default``: input ``images``, float32 ``(batch, H, W, 3)``, RGB in
  [0, 255] (NHWC); another shape fails the request with
  ``InvalidArgumentError`` naming the shape received and the one expected
  (the server and later requests are unaffected). The SavedModel of a model
  built with ``image_size=None`` takes ``(batch, None, None, 3)``: any size
  the patch size divides (another fails the request, naming both). Outputs
  ``probabilities`` (float32 ``(batch, classes)``),
  ``top_k_scores`` (float32), ``top_k_ids`` (int32) and ``top_k_labels``
  (string), each ``(batch, k)``. A model that returns an embedding (no classification head, e.g. a
  CLIP-like model with a projection: :attr:`keras_vit.ViTConfig.output`) has one output instead,
  ``embedding`` (float32 ``(batch, size)``, as the model computes it: no softmax, no top-k, no labels).
* ``serving_bytes``: input ``image_bytes``, string ``(batch,)`` of JPEG/PNG/
  GIF/BMP/WebP file contents (what the REST ``{"b64": ...}`` form arrives as);
  decoded and resized in the graph by the function ``keras-vit predict``
  reads files with (:mod:`keras_vit.inference.decoding`: EXIF orientation,
  gray to RGB, alpha composited onto white, bilinear resize with
  antialiasing) to ``(H, W)`` (for an ``image_size=None`` model, the size
  given to the export, by default its native size) and fed to the same
  model; same outputs, and the probabilities ``keras-vit predict`` gives for
  the same file. Bytes that do not decode, or an image with no pixels, fail
  that request with ``InvalidArgumentError`` (an error response in TF
  Serving); the server and later requests are unaffected.

``assets/keras_vit.json`` records the model's ``vit_config``, what its output is (``output``:
``probabilities``, ``logits`` (served as probabilities) or ``embedding``) and the size
``serving_bytes`` resizes to (``image_size``), so that ``keras-vit predict``
classifies files with the SavedModel of an ``image_size=None`` model at that
size (:data:`METADATA_FILE`); a NaFlex model's also the budget of patches its ``serving_bytes``
cuts images under (``max_patches``), the one ``keras-vit predict`` uses by default.

The graph holds only TensorFlow ops: it loads with ``tf.saved_model.load`` in a
process where keras_vit (or Keras) is not importable.
"""

import json
import os
import re
import shutil

import keras
import numpy as np

from keras_vit import saving
from keras_vit.architecture.model import config_of
from keras_vit.export import common
from keras_vit.export.errors import ExportVerificationError
from keras_vit.inference import decoding
from keras_vit.inference.runtimes import SAVED_MODEL_METADATA as METADATA_FILE

SERVING_SIGNATURE = "serving_default"
BYTES_SIGNATURE = "serving_bytes"
PIXELS_INPUT = "images"
BYTES_INPUT = "image_bytes"
OUTPUT_NAMES = ("probabilities", "top_k_ids", "top_k_labels", "top_k_scores")  # a classifier's
EMBEDDING_OUTPUT = "embedding"  # the one output of a model that returns an embedding
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def existing_versions(model_dir):
    """Numeric version folders under ``<base>/<name>``, sorted."""
    if not os.path.isdir(model_dir):
        return []
    return sorted(int(d) for d in os.listdir(model_dir) if re.fullmatch(r"\d+", d))


def version_path(base_path, name, version=None):
    """``(path, version)`` of the version folder to write; the next free version when None.

    Example:
    >>> import tempfile
    >>> base = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(base, "vit", "3"))
    >>> version_path(base, "vit")[1]  # one above the highest existing version
    4
    """
    if not name or os.sep in str(name) or str(name).startswith("."):
        raise ValueError(f"`name` must be a plain folder name. Received: name={name!r}")
    for folder in (os.fspath(base_path), os.path.join(os.fspath(base_path), str(name))):
        if os.path.exists(folder) and not os.path.isdir(folder):  # refused before any work, not by makedirs after it
            raise NotADirectoryError(f"The SavedModel's base path holds folders (NAME/VERSION), and {folder!r} is a "
                                     "file: choose another output folder.")
    model_dir = os.path.join(os.fspath(base_path), str(name))
    versions = existing_versions(model_dir)
    if version is None:
        version = versions[-1] + 1 if versions else 1
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 1:
        raise ValueError(f"`version` must be a positive int (TF Serving reads numeric folders). Received: version={version!r}")
    path = os.path.join(model_dir, str(int(version)))
    if os.path.exists(path):
        raise FileExistsError(
            f"SavedModel version already exists: {path!r}. Versions are never overwritten; "
            f"export to version={max(versions + [int(version)]) + 1} or leave version unset."
        )
    return path, int(version)


def bytes_image_size(model, image_size=None):
    """``(H, W)`` that ``serving_bytes`` resizes to: ``image_size``, else the model's input size, else its native size."""
    if image_size is not None:
        return tuple(int(v) for v in image_size)
    _, h, w, _ = model.input_shape
    if h is None or w is None:  # a model of any size (image_size=None)
        return config_of(model).native_image_size
    return h, w


def signature_outputs(model, labels, top_k):
    """``outputs(model output) -> {name: tensor}`` of a signature: ``probabilities`` and the ``top_k_*`` of a
    classifier (logits served as probabilities), ``embedding`` of a model that returns one."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    k = min(int(top_k), common.num_outputs(model))
    if k < 1:
        raise ValueError(f"`top_k` must be positive. Received: top_k={top_k!r}")
    kind = common.output_kind(model)
    label_table = None if kind == EMBEDDING_OUTPUT else tf.constant([str(v) for v in labels], dtype=tf.string)

    def outputs_of(outputs):
        outputs = tf.cast(outputs, tf.float32)
        if kind == EMBEDDING_OUTPUT:  # no classes: the embedding as the model computes it
            return {EMBEDDING_OUTPUT: outputs}
        probabilities = outputs if kind == "probabilities" else tf.nn.softmax(outputs, axis=-1)
        scores, ids = tf.math.top_k(probabilities, k=k)
        return {
            "probabilities": probabilities,
            "top_k_scores": scores,
            "top_k_ids": tf.cast(ids, tf.int32),
            "top_k_labels": tf.gather(label_table, ids),
        }

    return outputs_of


def build_archive(model, labels, top_k=5, *, image_size=None):
    """A ``keras.export.ExportArchive`` holding both serving signatures.

    ``image_size``: ``(H, W)`` of the bytes signature's resize, needed for a
    model of any input size (``image_size=None``); default the model's input size.
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    _, mh, mw, c = model.input_shape
    dynamic = mh is None or mw is None
    h, w = bytes_image_size(model, image_size)

    serve_outputs = signature_outputs(model, labels, top_k)

    def serve(images):
        # TF Serving does not check a request against the signature's static shape: without this an
        # image of another size is regrouped by the reshapes (8 rows for 2 images of twice the size)
        images = tf.ensure_shape(images, (None, mh, mw, c), name="check_image_shape")
        return serve_outputs(model(images, training=False))

    def images_of(image_bytes):
        # the one decoder and resize rule, as keras-vit predict reads files (keras_vit.inference.decoding)
        decode = decoding.traced_decode()
        return (tf.map_fn(lambda data: decoding.resize(decode(data), (h, w)), image_bytes,
                          fn_output_signature=tf.TensorSpec((h, w, c), tf.float32)),)

    pixels = (None, None, None, c) if dynamic else (None, h, w, c)
    return traced_archive(model, serve, [tf.TensorSpec(pixels, tf.float32, name=PIXELS_INPUT)], images_of)


def traced_archive(model, serve, input_signature, bytes_to_inputs):
    """A ``keras.export.ExportArchive`` of ``model`` with ``serving_default`` (``serve`` on ``input_signature``) and
    ``serving_bytes`` (``serve`` on the tuple ``bytes_to_inputs(image_bytes)``), each traced here once, before Keras
    sees it. Keras traced an endpoint given with its input signature once to list its variables and again inside
    tf.saved_model.save (another variable policy, another cache key), and serving_bytes traced the model and the
    decoder again; now serving_bytes calls serve's trace (and ``bytes_to_inputs`` the process's one trace of the
    decoder, :func:`keras_vit.inference.decoding.traced_decode`), and tf.saved_model.save traces serve once more
    where it stores the function itself (tests/export/test_export_saved_model.py counts the traces)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    serve = tf.function(serve, input_signature=input_signature, autograph=False)
    serve_graph = serve.get_concrete_function()

    def serve_bytes(image_bytes):
        return serve_graph(*bytes_to_inputs(image_bytes))

    serve_bytes = tf.function(
        serve_bytes, input_signature=[tf.TensorSpec((None,), tf.string, name=BYTES_INPUT)], autograph=False
    )
    serve_bytes.get_concrete_function()
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(SERVING_SIGNATURE, serve)  # traced: Keras takes its one trace
    archive.add_endpoint(BYTES_SIGNATURE, serve_bytes)
    return archive


def write_metadata(path, model, image_size=None, extra=None):
    """Write ``assets/keras_vit.json``: the model's ``vit_config`` (if it has one) and ``serving_bytes``'s size, and
    ``extra`` (a NaFlex model's: ``max_patches``, the budget its ``serving_bytes`` cuts images under)."""
    size = bytes_image_size(model, image_size)
    metadata = {"image_size": [int(v) for v in size], "output": common.output_kind(model), **(extra or {})}
    try:
        metadata["vit_config"] = config_of(model).to_dict()
    except ValueError:  # a Keras model that is no keras_vit model: the size only
        pass
    os.makedirs(os.path.join(path, "assets"), exist_ok=True)
    with open(os.path.join(path, METADATA_FILE), "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=2, sort_keys=True)
        f.write("\n")


def write_warmup(path, model_name, images):
    """Write ``assets.extra/tf_serving_warmup_requests`` (one request per signature).

    Needs ``tensorflow-serving-api`` (``pip install 'keras-vit[serving]'``);
    returns False and writes nothing without it.
    """
    try:
        # deferred: tensorflow-serving-api is an optional extra ([serving]); without it no warmup is written
        from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    except ImportError:
        return False
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    images = np.asarray(images[:1], dtype="float32")
    png = tf.io.encode_png(tf.cast(tf.round(images[0]), tf.uint8)).numpy()
    requests = [
        (SERVING_SIGNATURE, PIXELS_INPUT, tf.make_tensor_proto(images)),
        (BYTES_SIGNATURE, BYTES_INPUT, tf.make_tensor_proto([png], dtype=tf.string)),
    ]
    os.makedirs(os.path.join(path, "assets.extra"), exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(path, WARMUP_FILE)) as writer:
        for signature, input_name, tensor in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
            )
            request.inputs[input_name].CopyFrom(tensor)
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return True


def graph_ops(path):
    """Sorted op types in a SavedModel's graph and function library."""
    from tensorflow.core.protobuf import saved_model_pb2  # deferred: TensorFlow, as above

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return sorted(ops)


def _main_output(outputs):
    """``probabilities`` of a classifier's signature, ``embedding`` of an embedding model's."""
    return outputs["probabilities" if "probabilities" in outputs else EMBEDDING_OUTPUT].numpy()


def run_signature(loaded, images, batch_size=32):
    """``probabilities`` (or ``embedding``) of ``serving_default`` on ``images``, in batches."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    fn = loaded.signatures[SERVING_SIGNATURE]
    out = [_main_output(fn(**{PIXELS_INPUT: tf.constant(images[i : i + batch_size])}))
           for i in range(0, len(images), batch_size)]
    return np.concatenate(out)


def run_bytes_signature(loaded, files):
    """``probabilities`` (or ``embedding``) of ``serving_bytes`` on a list of encoded image files (bytes)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    fn = loaded.signatures[BYTES_SIGNATURE]
    return _main_output(fn(**{BYTES_INPUT: tf.constant(list(files), dtype=tf.string)}))


def export_saved_model(
    model, base_path, name=None, *, version=None, labels=None, top_k=5, warmup_images=None, check=None, image_size=None,
    archive=None, metadata=None,
):
    """Write a TF Serving version folder atomically.

    Args:
        model: a ``keras.Model`` (image classifier).
        base_path: TF Serving's model base path parent; the version goes to
            ``<base_path>/<name>/<version>``.
        name: model name (default: the Keras model's name).
        version: positive int; default one above the highest existing one.
            An existing version raises ``FileExistsError``.
        labels: class names (``len == classes``); None for a model that returns an embedding.
        top_k: how many classes the ``top_k_*`` outputs hold.
        warmup_images: images for ``assets.extra/tf_serving_warmup_requests``
            (written when tensorflow-serving-api is installed); None skips.
        check: optional ``check(tmp_path)`` run on the finished temporary
            folder before it is renamed into place; raising aborts the export.
        image_size: ``(H, W)`` of ``serving_bytes``'s resize (see :func:`build_archive`).
        archive: the ``ExportArchive`` to write (default :func:`build_archive`'s; a NaFlex model's:
            :func:`keras_vit.export.naflex_graph.build_archive`).
        metadata: more facts for ``assets/keras_vit.json`` (:func:`write_metadata`).

    Returns:
        ``(path, details)``: the version folder and facts for the report.
    """
    name = name or model.name
    path, version = version_path(base_path, name, version)
    model_dir = os.path.dirname(path)
    # the version is built beside <name>/, as .<name>.<version>.tmp-<pid>-<random>: a kill at any point
    # leaves no visible <name>/ or version, and the next export removes what a killed one left
    target = os.path.join(os.fspath(base_path), f"{name}.{version}")
    saving.remove_stale_temporaries(target, same_target=lambda base: re.fullmatch(rf"{re.escape(str(name))}\.\d+", base))
    new_base = not os.path.isdir(base_path)  # made for this export: removed again if it fails
    tmp = saving.temporary_path(target)
    details = {"name": name, "version": version, "signatures": [SERVING_SIGNATURE, BYTES_SIGNATURE]}
    try:
        (archive or build_archive(model, labels, top_k, image_size=image_size)).write_out(tmp, verbose=False)
        os.makedirs(os.path.join(tmp, "assets"), exist_ok=True)
        if labels is not None:  # an embedding has no classes to name
            with open(os.path.join(tmp, "assets", "labels.txt"), "w", encoding="utf-8") as f:
                f.write("".join(f"{label}\n" for label in labels))
        write_metadata(tmp, model, image_size, metadata)
        if warmup_images is not None:
            written = write_warmup(tmp, name, warmup_images)
            details["warmup"] = WARMUP_FILE if written else "skipped: tensorflow-serving-api not installed"
            if not written:
                print("keras_vit.export: warmup requests skipped (pip install 'keras-vit[serving]' to write them)")
        if check is not None:
            check(tmp)
        os.makedirs(model_dir, exist_ok=True)
        if os.path.exists(path):  # another writer got there first
            raise FileExistsError(f"SavedModel version already exists: {path!r}")
        os.rename(tmp, path)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        if new_base and not os.path.exists(path) and os.path.isdir(base_path) and not os.listdir(base_path):
            os.rmdir(base_path)
    return path, details


def export_verified(model, base_path, holder, *, name, version=None, make_archive=None, **kwargs):
    """:func:`export_saved_model` whose ``check`` (in ``kwargs``) stores its report in ``holder["report"]`` and raises
    :class:`~keras_vit.export.errors.ExportVerificationError` on a failure: the passed report with the version folder
    and what was written, or the failed one (its path the version that was not written). An existing version is
    refused before ``make_archive()`` (an archive other than :func:`build_archive`'s) does any work."""
    target, version = version_path(base_path, name, version)
    if make_archive is not None:
        kwargs["archive"] = make_archive()
    try:
        path, written = export_saved_model(model, base_path, name=name, version=version, **kwargs)
    except ExportVerificationError as error:
        error.report.path = target
        error.report.details["aborted"] = "verification failed; no version folder was written"
        return error.report
    result = holder["report"]
    result.path = path
    result.details.update(written)
    return result
