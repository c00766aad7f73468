"""Argument checks shared by the layers: each error names the argument and the value received."""

PACKAGE = "keras_vit"  # the registered-name prefix of every layer (".keras" files refer to "keras_vit>Name")
LAYER_NORM_EPSILON = 1e-6  # Flax default, used by every original checkpoint


def pair(value, name):
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) != 2 or not all(isinstance(v, int) for v in value):
        raise ValueError(f"`{name}` must be an int or a pair of ints. Received: {name}={value!r}")
    return value


def check_rate(value, name):
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")
    return float(value)
