"""Write keras_vit's table of timm's ViT-family registrations, read from timm itself (run in the peers environment).

    make peers && .venv-peers/bin/python tools/timm_registrations.py

For every ``@register_model`` function of timm's ViT-family modules (:data:`MODULES`), the function is called
with ``pretrained=False`` and timm's ``build_model_with_cfg`` is replaced, in that module only, by a recorder
that keeps the model class and the keyword arguments it is called with and builds nothing: exactly the
``model_args`` (merged with the module's ``_create_*`` defaults) that timm builds the architecture from.
Objects among them are written by name (a class, a function, a ``functools.partial`` with its keywords, the
hybrids' ResNet backbone as its stage depths and layer types). Every pretrained tag's ``pretrained_cfg``
(input size, whether it is fixed, mean, std, classes, pooling) is written beside it.

The output, ``keras_vit/weights/data/timm_registrations.json``, is shipped with the package and read by
:mod:`keras_vit.weights.timm_models`; a new timm release is a rerun of this script. It names timm's version and
the SHA-256 of each module file it read, so a reader can tell which timm it describes.
"""

import argparse
import dataclasses
import enum
import functools
import hashlib
import importlib
import inspect
import json
import os
import sys

MODULES = ("vision_transformer", "vision_transformer_hybrid", "deit", "eva", "naflexvit")
OUTPUT = os.path.join(os.path.dirname(__file__), os.pardir, "keras_vit", "weights", "data", "timm_registrations.json")
# pretrained_cfg entries that say how the weights were trained or are read; the rest (urls, licences) are left out
CFG_FIELDS = ("input_size", "fixed_input_size", "num_classes", "mean", "std", "global_pool", "interpolation",
              "crop_pct", "crop_mode", "hf_hub_id", "min_input_size", "label_names")


class _Recorded(Exception):
    """Raised by the recorder so that nothing is built."""

    def __init__(self, model_cls, kwargs):
        super().__init__()
        self.model_cls, self.kwargs = model_cls, kwargs


def _record(model_cls, variant, pretrained, **kwargs):
    raise _Recorded(model_cls, kwargs)


def _name(obj):
    name = getattr(obj, "__name__", None) or type(obj).__name__
    module = getattr(obj, "__module__", "") or ""
    return f"nn.{name}" if module.startswith("torch.nn") else name


def _describe_module(module):
    """A torch module passed as an argument (the hybrids' backbone): its class, stage depths, layer types."""
    import torch.nn as nn

    out = {"module": type(module).__name__}
    stages = getattr(module, "stages", None)
    out["layers"] = [len(getattr(stage, "blocks", stage)) for stage in stages] if stages is not None else []
    convs = [m for m in module.modules() if isinstance(m, nn.Conv2d)]
    norms = [m for m in module.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d, nn.LayerNorm))]
    pools = [m for m in module.modules() if isinstance(m, (nn.MaxPool2d, nn.AvgPool2d))]
    if convs:
        out["conv"] = type(convs[0]).__name__
        out["conv_eps"] = getattr(convs[0], "eps", None)
        out["stem_width"] = int(convs[0].out_channels)
        out["stem_kernel"] = list(convs[0].kernel_size)
        out["stem_stride"] = list(convs[0].stride)
    if norms:
        out["norm"] = type(norms[0]).__name__
        out["norm_eps"] = getattr(norms[0], "eps", None)
        out["norm_groups"] = getattr(norms[0], "num_groups", None)
    out["pools"] = [type(p).__name__ for p in pools]
    out["feature_channels"] = int(getattr(module, "num_features", 0) or 0) or None
    if type(module).__name__ == "ConvStem":  # MobileCLIP's: each ConvNormAct's conv, and its norm and act where they apply
        out["convs"] = [_describe_conv_norm_act(child) for child in module.children()]
    return out


def _describe_conv_norm_act(block):
    """timm's ``ConvNormAct``: its convolution's channels, kernel, stride, padding and bias; its norm (``Sequential``:
    none), epsilon and activation (with GELU's ``approximate``)."""
    conv, norm = block.conv, block.bn
    act = getattr(norm, "act", None)
    return {"channels": int(conv.out_channels), "kernel": list(conv.kernel_size), "stride": list(conv.stride),
            "padding": list(conv.padding) if isinstance(conv.padding, tuple) else conv.padding,
            "bias": conv.bias is not None, "norm": type(norm).__name__, "norm_eps": getattr(norm, "eps", None),
            "act": None if act is None or type(act).__name__ == "Identity" else _name(type(act)),
            "act_approximate": getattr(act, "approximate", None)}


def jsonable(value):
    """``value`` as JSON: numbers, strings, lists and dicts as they are; objects by name."""
    import torch.nn as nn

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, (int, float, str)) else value.name
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, functools.partial):
        return {"callable": _name(value.func), **{k: jsonable(v) for k, v in value.keywords.items()}}
    if isinstance(value, nn.Module):
        return _describe_module(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": type(value).__name__, **{f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if inspect.isclass(value) or callable(value):
        return _name(value)
    return repr(value)


def _defaults(cls):
    """The keyword defaults of a model class's ``__init__``, as JSON."""
    out = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if parameter.default is not inspect.Parameter.empty and name != "self":
            out[name] = jsonable(parameter.default)
    return out


def registrations():
    import timm
    from timm.models import get_pretrained_cfg, is_model_pretrained  # noqa: F401  (timm's public API)

    table = {"timm_version": timm.__version__, "generated_by": "tools/timm_registrations.py", "modules": {},
             "classes": {}, "architectures": {}}
    for module_name in MODULES:
        module = importlib.import_module(f"timm.models.{module_name}")
        with open(module.__file__, "rb") as f:
            table["modules"][module_name] = {"sha256": hashlib.sha256(f.read()).hexdigest()}
        original = module.build_model_with_cfg
        module.build_model_with_cfg = _record
        try:
            for arch in sorted(timm.list_models(module=module_name)):
                try:
                    timm.models.model_entrypoint(arch)(pretrained=False)
                except _Recorded as recorded:
                    cls, kwargs = recorded.model_cls, recorded.kwargs
                else:
                    raise RuntimeError(f"{arch}: built without calling build_model_with_cfg")
                table["classes"].setdefault(cls.__name__, _defaults(cls))
                for key in ("pretrained_filter_fn", "feature_cfg", "pretrained_strict", "pretrained_cfg_overlay"):
                    kwargs.pop(key, None)
                tags = {}
                for full in timm.list_pretrained(f"{arch}.*"):
                    cfg = get_pretrained_cfg(full).to_dict()
                    tags[full.partition(".")[2]] = {k: jsonable(cfg[k]) for k in CFG_FIELDS if cfg.get(k) is not None}
                default = get_pretrained_cfg(arch)  # the tag timm loads for the bare name: default_cfgs' first
                table["architectures"][arch] = {"module": module_name, "model_class": cls.__name__,
                                                "args": jsonable(kwargs), "tags": tags,
                                                "default_tag": default.tag if default is not None and tags else None,
                                                "default_cfg": {k: jsonable(v) for k, v in default.to_dict().items()
                                                                if k in CFG_FIELDS and v is not None}}
        finally:
            module.build_model_with_cfg = original
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    table = registrations()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, args.output)
    archs = table["architectures"]
    pretrained = sum(bool(a["tags"]) for a in archs.values())
    print(f"timm {table['timm_version']}: {len(archs)} registrations ({pretrained} with pretrained tags) -> {args.output}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
