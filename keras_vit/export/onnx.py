"""ONNX via tf2onnx, loaded and run in onnxruntime as part of the export.

tf2onnx reports unsupported ops in its log and still writes a model that
onnxruntime refuses. Exact GELU lowers to ``Erfc`` in TensorFlow, which ONNX
has no op for; it is converted here as ``1 - Erf(x)`` (a custom tf2onnx
handler; the Keras model is unchanged). Any op tf2onnx leaves unconverted, or
a model onnxruntime cannot load, fails the export.
"""

import numpy as np

from keras_vit.export import common
from keras_vit.export.errors import ExportError
from keras_vit.export.options import DEFAULT_OPSET
from keras_vit.inference import runtimes


def _erfc_handler(ctx, node, name, args):
    """``Erfc(x) -> Sub(1, Erf(x))``: exact, mathematically identical."""
    from tf2onnx import utils  # deferred: tf2onnx is an optional extra ([export]) and slow to import

    dtype = ctx.get_dtype(node.input[0])
    np_dtype = utils.map_onnx_to_numpy_type(dtype)
    erf = ctx.make_node("Erf", [node.input[0]], op_name_scope=node.name)
    one = ctx.make_const(utils.make_name(node.name + "_one"), np.array(1, dtype=np_dtype))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])
    return node


CUSTOM_OP_HANDLERS = {"Erfc": (_erfc_handler, [])}


def convert(model, opset=DEFAULT_OPSET, output_name=None):
    """Convert to an ONNX ``ModelProto`` with input ``images`` (dynamic batch)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends
    import tf2onnx  # deferred: an optional extra ([export]) and slow to import

    h, w, c = common.image_shape(model)
    spec = [tf.TensorSpec((None, h, w, c), tf.float32, name="images")]
    fn = tf.function(lambda images: tf.cast(model(images, training=False), tf.float32), input_signature=spec)
    try:
        proto, _ = tf2onnx.convert.from_function(
            fn, input_signature=spec, opset=int(opset), custom_op_handlers=CUSTOM_OP_HANDLERS
        )
    except Exception as error:
        raise ExportError(f"tf2onnx failed: {error}") from error
    output_name = output_name or common.output_kind(model)  # probabilities, logits or embedding
    _rename_output(proto, proto.graph.output[0].name, output_name)
    return proto


def _rename_output(proto, old, new):
    for node in proto.graph.node:
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    for output in proto.graph.output:
        if output.name == old:
            output.name = new


def graph_ops(proto):
    return sorted({node.op_type for node in proto.graph.node})


def session(path_or_bytes, num_threads=None):
    """An onnxruntime CPU session; a model it cannot load raises ``ExportError``."""
    try:
        return runtimes.onnx_session(path_or_bytes, num_threads)  # the session keras_vit.predict runs .onnx files in
    except ImportError:
        raise
    except Exception as error:
        raise ExportError(f"onnxruntime cannot load the exported model: {error}") from error


def run(path_or_bytes, images, batch_size=32, *, num_threads=None):
    sess = session(path_or_bytes, num_threads)
    name = sess.get_inputs()[0].name
    out = [sess.run(None, {name: np.asarray(images[i : i + batch_size], "float32")})[0]
           for i in range(0, len(images), batch_size)]
    return np.concatenate(out)


def write(proto, path, labels):
    """Write the model with the labels in its metadata (``labels``: newline-joined; none for an embedding)."""
    if labels is not None:
        entry = proto.metadata_props.add()
        entry.key = "labels"
        entry.value = "\n".join(str(v) for v in labels)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
