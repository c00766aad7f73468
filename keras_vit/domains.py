"""The domains of numeric (and enumerated) arguments: one rule for the Python API and the command line.

A domain says which values an argument takes (``Interval(0, 1, closed="[)")``,
:data:`POSITIVE_INT`, :data:`PROBABILITY`, ``Choice("adamw", "sgd")``...). The
API checks a value with :meth:`Domain.check`, which raises a ``ValueError``
naming the argument, the domain and the value; the ``keras-vit`` commands get
their ``argparse`` types from the same declarations (:meth:`Domain.argparse_type`),
so that a flag and the argument it maps to cannot drift apart. NaN and
infinities are outside every interval; a bool is never a number.

Example:
>>> LABEL_SMOOTHING = Interval(0, 1, closed="[)")
>>> LABEL_SMOOTHING.check(0.1, "label_smoothing")
0.1
>>> LABEL_SMOOTHING.check(1.5, "label_smoothing")
Traceback (most recent call last):
...
ValueError: `label_smoothing` must be in [0, 1). Received: label_smoothing=1.5
>>> LABEL_SMOOTHING.parse("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be in [0, 1), got nan
>>> POSITIVE_INT.check(0, "epochs")
Traceback (most recent call last):
...
ValueError: `epochs` must be a positive int. Received: epochs=0
>>> check_arguments({"epochs": POSITIVE_INT, "ema": Optional(Interval(0, 1, closed="[)"))}, epochs=3, ema=None)
{'epochs': 3, 'ema': None}
"""

import argparse
import math
import numbers

_UNSET = object()


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _kind(value):
    if isinstance(value, bool):
        return bool
    return int if _is_int(value) else type(value)


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Domain:
    """The values one argument takes. Subclasses define :meth:`normalize` and :attr:`description`."""

    description = "a value"

    def normalize(self, value):
        """``value`` in its canonical type (an ``int``, a ``float``...), or ``_UNSET`` when it is outside the domain."""
        raise NotImplementedError

    def from_text(self, text):
        """The value a command-line string stands for (before the domain is checked), or ``_UNSET``."""
        return text

    def contains(self, value):
        return self.normalize(value) is not _UNSET

    def check(self, value, name):
        """``value`` (canonical type) if it is in the domain, else a ``ValueError`` naming ``name``, the domain and the value."""
        normalized = self.normalize(value)
        if normalized is _UNSET:
            raise ValueError(f"`{name}` must be {self.description}. Received: {name}={value!r}")
        return normalized

    def parse(self, text):
        """The value of a command-line string, or ``argparse.ArgumentTypeError("must be ..., got TEXT")``."""
        value = self.from_text(text)
        normalized = _UNSET if value is _UNSET else self.normalize(value)
        if normalized is _UNSET:
            raise argparse.ArgumentTypeError(f"must be {self.description}, got {text}")
        return normalized

    def argparse_type(self):
        """A ``type=`` for ``argparse``: :meth:`parse` (argparse prints ``argument --FLAG: must be ..., got TEXT``, exit 2)."""

        def parse(text):
            return self.parse(text)

        parse.__name__ = type(self).__name__
        return parse

    def __repr__(self):
        return f"<{type(self).__name__}: {self.description}>"


class Interval(Domain):
    """Numbers between ``low`` and ``high`` (None: unbounded), ``closed`` one of ``"[]"``, ``"[)"``, ``"(]"``, ``"()"``.

    ``integer=True`` takes ints only (not floats, not bools); otherwise any
    finite real number, returned as a ``float``.
    """

    def __init__(self, low=None, high=None, *, closed="[]", integer=False):
        if closed not in ("[]", "[)", "(]", "()"):
            raise ValueError(f"`closed` must be one of '[]', '[)', '(]', '()'. Received: closed={closed!r}")
        self.low, self.high, self.closed, self.integer = low, high, closed, integer
        self.description = self._describe()

    def _describe(self):
        low, high, (left, right) = self.low, self.high, self.closed
        if self.integer:
            if high is None and low is not None:
                if (low, left) in ((1, "["), (0, "(")):
                    return "a positive int"
                return f"an int {'>=' if left == '[' else '>'} {low}"
            if low is None and high is None:
                return "an int"
            return f"an int in {left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        if high is None and low is not None:
            return f"a finite number {'>=' if left == '[' else '>'} {low:g}"
        if low is None and high is None:
            return "a finite number"
        return f"in {left}{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}{right}"

    def normalize(self, value):
        if self.integer:
            if not _is_int(value):
                return _UNSET
            value = int(value)
        else:
            if not _is_real(value):
                return _UNSET
            value = float(value)
            if not math.isfinite(value):
                return _UNSET
        left, right = self.closed
        if self.low is not None and not (value >= self.low if left == "[" else value > self.low):
            return _UNSET
        if self.high is not None and not (value <= self.high if right == "]" else value < self.high):
            return _UNSET
        return value

    def from_text(self, text):
        try:
            return int(text, 10) if self.integer else float(text)
        except (TypeError, ValueError):
            return _UNSET


class Choice(Domain):
    """One of a few values (strings or ints); a command-line string ``"2"`` stands for the int 2 when 2 is a choice."""

    def __init__(self, *values):
        self.values = tuple(values)
        self.description = f"one of {', '.join(repr(v) for v in self.values)}"

    def normalize(self, value):
        for choice in self.values:
            if _kind(value) is _kind(choice) and value == choice:  # 1 is not True, nor "1"
                return choice
        return _UNSET

    def from_text(self, text):
        for choice in self.values:
            if str(choice) == text:
                return choice
        return _UNSET


class Optional(Domain):
    """``domain`` or None (the API's "not set"; on the command line, a flag left out)."""

    def __init__(self, domain):
        self.domain = domain
        self.description = domain.description  # None is "not set", not a value to offer

    def normalize(self, value):
        return None if value is None else self.domain.normalize(value)

    def from_text(self, text):
        return self.domain.from_text(text)

    def parse(self, text):  # the flag's own domain: None is a flag left out
        return self.domain.parse(text)


class IntSet(Domain):
    """A set of positive ints, given as a list or as ``"16,24,36"`` on the command line, as a sorted tuple."""

    description = "positive ints, e.g. 64,128,256"

    def normalize(self, value):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
            return _UNSET
        if not all(_is_int(v) and v >= 1 for v in value):
            return _UNSET
        return tuple(sorted({int(v) for v in value}))

    def from_text(self, text):
        try:
            return [int(part, 10) for part in str(text).split(",")]
        except ValueError:
            return _UNSET


POSITIVE_INT = Interval(1, integer=True)
NON_NEGATIVE_INT = Interval(0, integer=True)
POSITIVE = Interval(0, closed="()")  # a finite number > 0
NON_NEGATIVE = Interval(0)  # a finite number >= 0
PROBABILITY = Interval(0, 1, closed="[]")
FRACTION = Interval(0, 1, closed="[)")  # a share that cannot be the whole: label smoothing, dropout, hold-out
SEED = Interval(0, 2**32 - 1, integer=True)  # numpy's seeds (keras.utils.set_random_seed)


def check_arguments(domains, **values):
    """``{name: checked value}`` for each value whose name ``domains`` declares (the others are returned as given).

    Raises the ``ValueError`` of :meth:`Domain.check` of the first value out of its domain.
    """
    return {name: domains[name].check(value, name) if name in domains else value for name, value in values.items()}
