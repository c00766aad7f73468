"""Argument checks shared by the layers (each error names the argument and the value received)."""

import numbers

import keras

from keras_vit.domains import FRACTION

PACKAGE = "keras_vit"  # the registered-name prefix of every layer (".keras" files refer to "keras_vit>Name")
LAYER_NORM_EPSILON = 1e-6  # Flax default, used by every original checkpoint


def pair(value, name):
    """``value`` as a pair of positive ints: an int ``p`` is ``(p, p)``."""
    values = (value, value) if _is_int(value) else value
    try:
        values = tuple(values)
    except TypeError:
        values = None
    if values is None or isinstance(value, str) or len(values) != 2 or not all(_is_int(v) for v in values):
        raise ValueError(f"`{name}` must be an int or a pair of ints. Received: {name}={value!r}")
    if min(values) < 1:
        raise ValueError(f"`{name}` must be positive. Received: {name}={value!r}")
    return tuple(int(v) for v in values)


def positive_int(value, name):
    """``value`` as an int >= 1."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def check_rate(value, name):
    """``value`` as a float in [0, 1) (:data:`keras_vit.domains.FRACTION`)."""
    return FRACTION.check(value, name)


def built_when_created(layer):
    """Mark a stateless layer built in its ``__init__`` (as Keras' own ``Dropout`` is).

    ``model.quantize()`` refuses unbuilt layers, and a layer that its parent calls only
    inside ``call`` is otherwise never built in a functional model. A subclass that
    defines its own ``build`` is left unbuilt, so its ``build`` still runs.
    """
    if type(layer).build is keras.layers.Layer.build:
        layer.built = True


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
