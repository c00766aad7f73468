"""Public names imported on first use (PEP 562), for the packages whose import must import none of their modules:
``keras_vit`` (no TensorFlow at ``import keras_vit``), ``keras_vit.export`` (its options load without Keras) and
``keras_vit.weights`` (its ImageNet lists load without Keras)."""

import importlib


def lazy_exports(namespace, exports):
    """``(__getattr__, __dir__, __all__)`` for the package whose ``globals()`` is ``namespace``: each name of
    ``exports`` (``{module: names}``) imported from its module on first use, then kept in the package.

    Example:
    >>> namespace = {"__name__": "package"}
    >>> getattr_, dir_, all_ = lazy_exports(namespace, {"math": ("pi",)})
    >>> all_, round(getattr_("pi"), 2), "pi" in namespace
    (['pi'], 3.14, True)
    >>> getattr_("tau")
    Traceback (most recent call last):
    ...
    AttributeError: module 'package' has no attribute 'tau'
    """
    module_of = {name: module for module, names in exports.items() for name in names}
    names = sorted(module_of)

    def __getattr__(name):
        if name not in module_of:  # a submodule not imported yet: `from package import module` imports it next
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module_of[name]), name)  # later look-ups skip this
        return value

    def __dir__():
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__, names
