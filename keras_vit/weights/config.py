"""Fields of a ``config.json``, read with their types checked (an error names the file, the field and the value)
and checked against the weights: a config is written by hand as often as by a library, and the one beside a state
dict may belong to another model.
"""

import json
import warnings

from keras_vit.architecture.arguments import positive_pair
from keras_vit.domains import NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT
from keras_vit.errors import CheckpointError
from keras_vit.layers.embedding import position_prefix


def read_json(path):
    """The JSON object in ``path``, or a ``CheckpointError`` naming the file (unreadable, not JSON, not an object)."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"Cannot read {path!r}: {error}") from error
    return json_object(value, path)


def json_object(value, path, field=None):
    """``value`` if it is a JSON object (a dict), else a ``CheckpointError`` naming ``path`` (and ``field``).

    Example:
    >>> json_object([1], "config.json")
    Traceback (most recent call last):
    ...
    keras_vit.errors.CheckpointError: 'config.json': expected a JSON object ({"field": value, ...}). Received: list
    """
    if isinstance(value, dict):
        return value
    if field is None:
        raise CheckpointError(
            f'{path!r}: expected a JSON object ({{"field": value, ...}}). Received: {type(value).__name__}'
        )
    raise CheckpointError(f"{path!r}: {field}={value!r}, expected a JSON object.")


def number(config, field, default, path, integer=False, zero=False):
    """``config[field]`` (``default`` when absent): a positive number, or a positive integer when ``integer`` (a
    count that may be 0 when ``zero``: register tokens).

    Example:
    >>> number({"layer_norm_eps": 1e-12}, "layer_norm_eps", 1e-12, "c")
    1e-12
    >>> number({"num_attention_heads": "4"}, "num_attention_heads", 12, "c", integer=True)
    Traceback (most recent call last):
    ...
    keras_vit.errors.CheckpointError: 'c': num_attention_heads='4', expected a positive integer.
    """
    if field not in config:
        return default
    try:
        return (NON_NEGATIVE_INT if zero else POSITIVE_INT if integer else POSITIVE).check(config[field], field)
    except ValueError:
        kind = "non-negative integer" if zero else "positive integer" if integer else "positive number"
        raise CheckpointError(f"{path!r}: {field}={config[field]!r}, expected a {kind}.") from None


class Fields:
    """The fields of one config object, read with their types checked and quoted as the file writes them: ``where``
    before each name (``"vision_config."``), ``defaults`` for an absent field, named as ``whose`` default.

    Example:
    >>> read = Fields({"hidden_size": 32}, "config.json", defaults={"num_layers": 12}, whose="transformers'")
    >>> read.number("hidden_size"), read.said("num_layers", read.number("num_layers"))
    (32, "num_layers absent (transformers' default 12)")
    """

    def __init__(self, config, path, where="", defaults=None, whose="the library's", required=None):
        self.config, self.path, self.where, self.defaults, self.whose = config, path, where, defaults or {}, whose
        self.required = required  # who names every field without a default: a missing one is refused, naming it

    def said(self, field, value):
        if field in self.config:
            return f"{self.where}{field}={value!r}"
        return f"{self.where}{field} absent ({self.whose} default {value!r})"

    def number(self, field, default=None, integer=True, zero=False):
        value = number(self.config, field, self.defaults.get(field, default), self.path, integer=integer, zero=zero)
        if value is None and self.required:
            raise CheckpointError(f"{self.path!r}: {self.where}{field} is missing; {self.required} names it.")
        return value

    def flag(self, field, default=None):
        value = self.config.get(field, self.defaults.get(field, default))
        if not isinstance(value, bool):
            raise CheckpointError(f"{self.path!r}: {self.where}{field}={value!r}, expected true or false.")
        return value


def size_pair(value, path, field):
    """An int or ``[height, width]`` size as ``(height, width)`` (:func:`~keras_vit.architecture.arguments.positive_pair`),
    or a ``CheckpointError`` naming the field.

    Example:
    >>> size_pair(224, "c", "image_size"), size_pair([3, 384, 384][1:], "c", "input_size")
    ((224, 224), (384, 384))
    """
    try:
        return positive_pair(value, field)
    except ValueError:
        raise CheckpointError(f"{path!r}: {field}={value!r}, expected a positive integer or [height, width].") from None


def indexed_names(mapping, field, path):
    """The names of a head's outputs from ``{"0": name, "1": name, ...}`` (or a list), in index order.

    The keys must be the indices ``0 .. N-1``, each once, in any order; anything else would shift names onto the
    wrong outputs: a warning names the file, the field and the problem, and the weights load without class names.

    Example:
    >>> indexed_names({"1": "dog", "0": "cat"}, "id2label", "config.json")
    ['cat', 'dog']
    """
    if mapping is None or isinstance(mapping, list):
        return [str(name) for name in mapping] if mapping else None
    problem = None if isinstance(mapping, dict) else f"is {mapping!r}, expected a JSON object {{index: name}}"
    names = {}
    for key, name in mapping.items() if problem is None else ():
        try:
            index = int(key)
        except (TypeError, ValueError):
            problem = f"key {key!r} is not an index"
            break
        if index in names:
            problem = f"names index {index} twice (keys {sorted(k for k in mapping if int(k) == index)})"
            break
        names[index] = str(name)
    count = len(names)
    missing, extra = sorted(set(range(count)) - set(names)), sorted(set(names) - set(range(count)))
    if problem is None and not missing:
        return [names[i] for i in range(count)]
    problem = problem or (f"lacks index {', '.join(map(str, missing))} and has {', '.join(map(str, extra))} "
                          f"outside 0..{count - 1}")
    warnings.warn(
        f"{path!r}: {field} {problem}; the model gets no class names from it "
        "(predict prints class_0, class_1, ...; pass labels= to name them).",
        UserWarning,
        stacklevel=2,
    )
    return None


def check_against_weights(expected, shapes, path, declared=None):
    """Refuse weights whose shapes disagree with their config (naming the field and both values).

    ``expected``: ``[(quantity, field, value), ...]``, what the config states: ``field`` is how it says it
    (``"model_args.embed_dim=64"``, or ``"has no hidden_size (...)"`` for a default); an ``image_size``
    ``(height, width)`` is compared as a grid of patches with the position embeddings, past the class and distillation
    tokens' where they have one (the ``declared`` record's ``prefix_positions``, ViTConfig's field: not with timm's
    ``no_embed_class``; absent: the paper's, they have), and past the registers' with its ``register_positions``.

    Example:
    >>> check_against_weights([("hidden_size", "hidden_size=8", 8)], {"embedding/kernel": (4, 4, 3, 16)}, "m")
    Traceback (most recent call last):
    ...
    keras_vit.errors.CheckpointError: 'm': config.json says hidden_size=8 but the weights have 16.
    """
    declared = declared or {}
    prefix_positions = declared["prefix_positions"].value if "prefix_positions" in declared else True
    register_positions = declared["register_positions"].value if "register_positions" in declared else False
    kernel = shapes.get("embedding/kernel")
    found = {"qkv_bias": has_query_bias(shapes), "class_token": "cls" in shapes}
    if kernel is not None:
        found.update(patch_size=(kernel[0], kernel[1]), num_channels=kernel[2], hidden_size=kernel[3])
    blocks = {k.split("/")[1] for k in shapes if k.startswith("Transformer/encoderblock_")}
    found["num_layers"] = len(blocks) or None
    dense = shapes.get("Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel")
    found["mlp_dim"] = dense[-1] if dense is not None else None
    pre_logits = shapes.get("pre_logits/kernel")  # timm's num_features is the pre-logits width where there is one
    found["num_features"] = pre_logits[-1] if pre_logits is not None else found.get("hidden_size")
    head = shapes.get("head/kernel")
    found["num_classes"] = head[-1] if head is not None else None
    posemb = shapes.get("Transformer/posembed_input/pos_embedding")
    registers = int(shapes["reg"][1]) if "reg" in shapes else 0
    prefix = position_prefix(int(found["class_token"]) + int("dist" in shapes), registers, prefix_positions, register_positions)
    positions = posemb[1] - prefix if posemb is not None and len(posemb) == 3 else None
    for quantity, field, value in expected:
        said = field if field.startswith("has no ") else f"says {field}"
        if quantity == "image_size":
            if positions is None or kernel is None:
                continue
            rows, cols = value[0] // kernel[0], value[1] // kernel[1]
            if rows * cols != positions:
                raise CheckpointError(
                    f"{path!r}: config.json {said} ({rows} x {cols} patches of {kernel[0]}) "
                    f"but the weights' position embeddings cover {positions} patches."
                )
            continue
        have = found.get(quantity)
        want = (value, value) if quantity == "patch_size" and isinstance(value, int) else value
        want = tuple(want) if isinstance(want, list) else want
        if have is not None and have != want:
            shown = have[0] if quantity == "patch_size" and have[0] == have[1] else have
            raise CheckpointError(f"{path!r}: config.json {said} but the weights have {shown!r}.")


def has_query_bias(shapes):
    """Whether the weights (their original keys) have a block's query bias."""
    return any(key.endswith("MultiHeadDotProductAttention_1/query/bias") for key in shapes)
