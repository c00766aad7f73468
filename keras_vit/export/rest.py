"""TF Serving's REST ``:predict`` row format, answered by a loaded SavedModel.

TF Serving turns ``{"instances": [...]}`` into one tensor per input (a
``{"b64": "..."}`` value becomes the decoded bytes of a DT_STRING tensor),
runs the signature, and answers ``{"predictions": [...]}`` or, when the
signature fails (e.g. bytes that are not an image), ``{"error": "..."}``
with HTTP 400 while the server keeps serving. :func:`predict` does the same
in-process, so requests built by ``export/rest_client.py`` can be checked
without a server.
"""

import base64
import binascii

import numpy as np


def _decode(value):
    if isinstance(value, dict) and set(value) == {"b64"}:
        if not isinstance(value["b64"], str):
            raise ValueError(f"A 'b64' value must be a base64 string. Received: {type(value['b64']).__name__}")
        try:
            return base64.b64decode(value["b64"])
        except binascii.Error as error:
            raise ValueError(f"A 'b64' value is not valid base64 ({error})") from None
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def request_inputs(request, input_specs):
    """``{input_name: numpy array}`` from a row-format request for a signature's inputs.

    Example:
    >>> import tensorflow as tf
    >>> request_inputs({"instances": [{"b64": "aGk="}]}, {"image_bytes": tf.TensorSpec((None,), tf.string)})
    {'image_bytes': array([b'hi'], dtype=object)}
    """
    if not isinstance(request, dict):
        raise ValueError(f"The request body must be a JSON object. Received: {type(request).__name__}")
    instances = request.get("instances")
    if not isinstance(instances, list) or not instances:
        raise ValueError(f"A row-format request needs a non-empty 'instances' list. Received keys: {sorted(request)}")
    names = list(input_specs)
    columns = {name: [] for name in names}
    for instance in instances:
        if isinstance(instance, dict) and set(instance) != {"b64"}:
            missing = set(names) - set(instance)
            if missing:
                raise ValueError(f"Instance misses inputs {sorted(missing)}. Received keys: {sorted(instance)}")
            for name in names:
                columns[name].append(_decode(instance[name]))
        elif len(names) == 1:
            columns[names[0]].append(_decode(instance))
        else:
            raise ValueError(f"The signature has inputs {names}; each instance must be an object naming them.")
    out = {}
    for name, values in columns.items():
        spec = input_specs[name]
        dtype = object if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype
        out[name] = np.array(values, dtype=dtype)
    return out


def _jsonable(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value] if value.dtype == object else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def predict(loaded, request):
    """Answer a REST ``:predict`` request body (a dict) like TF Serving does.

    Returns:
        ``(status, body)``: ``(200, {"predictions": [...]})`` with one object
        of named outputs per instance (for a signature of one output, its value
        per instance, unnamed, as TF Serving's row format answers), or ``(400, {"error": message})`` for
        any request it cannot answer (not an object, no ``instances``, a
        ``signature_name`` that is not a known name, a ``b64`` that is not
        a base64 string, values of the wrong type or shape).
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    if not isinstance(request, dict):
        return 400, {"error": f"The request body must be a JSON object. Received: {type(request).__name__}"}
    signature_name = request.get("signature_name", "serving_default")
    if not isinstance(signature_name, str):
        return 400, {"error": f"'signature_name' must be a string. Received: {signature_name!r}"}
    if signature_name not in loaded.signatures:
        return 400, {"error": f"Serving signature name: \"{signature_name}\" not found in signature def"}
    fn = loaded.signatures[signature_name]
    specs = fn.structured_input_signature[1]
    try:
        inputs = request_inputs(request, specs)
        tensors = {name: tf.constant(value, dtype=specs[name].dtype) for name, value in inputs.items()}
        outputs = fn(**tensors)
    except (ValueError, TypeError, tf.errors.OpError) as error:  # a malformed request is answered, never raised
        message = error.message if isinstance(error, tf.errors.OpError) else str(error)
        return 400, {"error": message}
    arrays = {name: tensor.numpy() for name, tensor in outputs.items()}
    count = len(next(iter(arrays.values())))
    if len(arrays) == 1:  # TF Serving omits the name of a signature's only output (an embedding's)
        (array,) = arrays.values()
        return 200, {"predictions": [_jsonable(array[i]) for i in range(count)]}
    return 200, {"predictions": [{name: _jsonable(a[i]) for name, a in arrays.items()} for i in range(count)]}
