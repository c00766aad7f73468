"""Does LiteRT's GPU delegate take a ``.tflite`` whole? Its own rules, read from the flatbuffer.

The delegate hands an op to the GPU only when its parser accepts it; what it refuses runs on the CPU,
which splits the graph (and, for a ViT, loses most of the gain) without an error. The rules checked here
are the delegate's, from the LiteRT sources (``google-ai-edge/LiteRT``, ``tflite/...``; the same files
live under ``tensorflow/lite/...`` in TensorFlow):

* ``delegates/gpu/common/model_builder.cc``, ``NewOperationParser``: the ops it parses (:data:`PARSED_OPS`;
  ``QUANTIZE``/``DEQUANTIZE`` with quantized models allowed, the delegate's default) and the custom ops
  it knows (:data:`CUSTOM_OPS`). Rule ``op``.
* same file, each parser's ``IsSupported``: ``CheckMaxSupportedOpVersion`` (:data:`MAX_VERSION`). Rule ``version``.
* same file, ``GetOpsToReplace`` and ``IsAllAllowedTensors``: no input or output of rank >= 5 (rule ``rank``);
  every non-constant tensor float32 or float16 (int8/uint8 with quantized models, int32 into ``GATHER``
  and ``CAST``, bool where logical ops produce it) (rule ``type``).
* same file, ``TransposeOperationParser::Parse``: a permutation of 2, 3 or 4 axes (rule ``transpose``).
* same file, ``BatchedMatMulOperationParser::Parse``: two runtime inputs, or one and a 2-D constant; it
  reads neither ``adj_x`` nor ``adj_y``, so a transposed operand would be taken as it is stored (rule ``matmul``).
* ``tools/versioning/gpu_compatibility.cc``, ``CheckGpuDelegateCompatibility`` (which the parsers call):
  ``STRIDED_SLICE`` with no ellipsis, new-axis or shrink-axis mask on a 3-D or 4-D input; ``SLICE`` on
  3-D or 4-D; ``SOFTMAX`` with beta 1; ``FULLY_CONNECTED`` with default weights, a runtime input and
  ``keep_num_dims`` only at equal ranks; ``MEAN``/``SUM``/``REDUCE_*`` with constant int32 axes; one-input
  elementwise ops with one runtime input, two-input ones with two runtime inputs or one and a constant;
  ``ADD``/``MUL`` broadcasting (``CheckAddMulBroadcastCompatibility``, enhanced broadcast) and ``MUL``'s
  "one input not smaller in every dimension"; ``RESHAPE`` with one runtime input (a shape computed at run
  time is refused); ``PAD`` with 4x2 or 3x2 paddings; ``GATHER`` with 1-D int32 indices (rule ``options``).
* ``core/subgraph.cc``, ``Subgraph::ModifyGraphWithDelegateImpl``: a delegate without
  ``kTfLiteDelegateFlagsAllowDynamicTensors`` (the GPU delegate) is refused on a graph with a dynamic
  tensor; a ``-1`` in a tensor's shape signature is one (rule ``dynamic``).

Not checked: rules that need the delegate's runtime (GPU memory limits, the backend's kernels) and
subgraphs other than the main one. ``tf.lite.experimental.Analyzer.analyze(..., gpu_compatibility=True)``
checks ``gpu_compatibility.cc`` only (not the rank, type or version rules of ``model_builder.cc``, and it
refuses ``UNPACK``, which ``model_builder.cc`` parses); tests/export/test_gpu_delegate.py compares the two.
"""

import dataclasses
import os
import struct

# delegates/gpu/common/model_builder.cc, NewOperationParser
PARSED_OPS = frozenset(
    "ABS ADD ADD_N AVERAGE_POOL_2D BATCH_MATMUL CAST CONCATENATION CONV_2D COS CUMSUM DENSIFY DEPTHWISE_CONV_2D "
    "DEPTH_TO_SPACE DEQUANTIZE DIV EQUAL ELU EXP FLOOR FLOOR_DIV FLOOR_MOD FULLY_CONNECTED GATHER GELU GREATER "
    "GREATER_EQUAL HARD_SWISH LESS LESS_EQUAL LOGISTIC LOG LOGICAL_AND LSTM MAXIMUM MAX_POOL_2D MEAN MINIMUM "
    "MIRROR_PAD MUL NEG NOT_EQUAL ONE_HOT PACK PAD PADV2 POW REDUCE_MAX REDUCE_MIN REDUCE_PROD QUANTIZE RELU RELU6 "
    "RELU_0_TO_1 RELU_N1_TO_1 LEAKY_RELU PRELU RESHAPE RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR RSQRT SELECT "
    "SELECT_V2 SIGN SIN SLICE SOFTMAX SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE STRIDED_SLICE "
    "SUB SUM TANH TILE TRANSPOSE TRANSPOSE_CONV UNPACK".split()
)
CUSTOM_OPS = frozenset({"Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D", "Resampler"})

_ELEMENTWISE_1 = "ABS COS ELU EXP FLOOR GELU LOG LOGISTIC NEG RSQRT SIGN SIN SQRT SQUARE TANH".split()
_ELEMENTWISE_2 = (
    "ADD DIV EQUAL FLOOR_DIV FLOOR_MOD GREATER GREATER_EQUAL LESS LESS_EQUAL LOGICAL_AND MAXIMUM MINIMUM MUL "
    "NOT_EQUAL POW SQUARED_DIFFERENCE SUB".split()
)
# each parser's CheckMaxSupportedOpVersion (model_builder.cc); parsers without one are absent
MAX_VERSION = {
    **{op: 2 for op in _ELEMENTWISE_1 + _ELEMENTWISE_2},
    "MUL": 3, "CONCATENATION": 2, "CONV_2D": 6, "CUMSUM": 1, "DENSIFY": 1, "DEPTHWISE_CONV_2D": 6, "DEQUANTIZE": 3,
    "FULLY_CONNECTED": 9, "GATHER": 1, "LSTM": 4, "ONE_HOT": 1, "PRELU": 1, "PAD": 2, "PADV2": 2, "MIRROR_PAD": 2,
    "AVERAGE_POOL_2D": 2, "MAX_POOL_2D": 2, "QUANTIZE": 2, "RELU": 2, "RELU6": 2, "RELU_0_TO_1": 2,
    "RELU_N1_TO_1": 2, "LEAKY_RELU": 2, "RESHAPE": 1, "RESIZE_BILINEAR": 3, "RESIZE_NEAREST_NEIGHBOR": 3,
    "SELECT": 1, "SELECT_V2": 1, "SLICE": 2, "SOFTMAX": 2, "SPACE_TO_DEPTH": 2, "STRIDED_SLICE": 4,
    "TRANSPOSE_CONV": 3, "TRANSPOSE": 4,
}
_LOGICAL = {"EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "NOT_EQUAL"}
_FLOATS, _QUANT = {"FLOAT32", "FLOAT16"}, {"INT8", "UINT8"}

_RULES = {
    "op": "model_builder.cc NewOperationParser: an op the delegate does not parse",
    "version": "model_builder.cc CheckMaxSupportedOpVersion: an op version above the parser's",
    "rank": "model_builder.cc IsAllAllowedTensors: a tensor of rank >= 5",
    "type": "model_builder.cc GetOpsToReplace: a runtime tensor of a type the delegate does not take",
    "transpose": "model_builder.cc TransposeOperationParser: a permutation of more than 4 axes",
    "matmul": "model_builder.cc BatchedMatMulOperationParser: an operand it cannot take",
    "options": "gpu_compatibility.cc CheckGpuDelegateCompatibility: options or inputs it refuses",
    "dynamic": "core/subgraph.cc ModifyGraphWithDelegateImpl: a dynamic tensor (shape signature -1)",
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One reason an op stays on the CPU: ``rule`` (a key of the rules above), the op and what breaks it."""

    index: int
    op: str
    rule: str
    detail: str

    def __str__(self):
        return f"#{self.index} {self.op}: {self.detail} [{_RULES[self.rule]}]"


@dataclasses.dataclass
class GpuDelegateReport:
    """What LiteRT's GPU delegate would take of a ``.tflite``: every op, or the ops left to the CPU and why.

    Attributes:
        path: the file (or ``"<bytes>"``).
        ops: the main subgraph's op names, in execution order.
        findings: one :class:`Finding` per broken rule (an op may break several).
    """

    path: str
    ops: list
    findings: list

    @property
    def num_ops(self):
        return len(self.ops)

    @property
    def whole(self):
        """True when the delegate takes every op (one GPU partition, nothing on the CPU)."""
        return not self.findings

    @property
    def cpu_ops(self):
        """Sorted indices of the ops the delegate would leave to the CPU."""
        return sorted({f.index for f in self.findings})

    @property
    def rank5_tensors(self):
        """Sorted names of the distinct tensors of rank >= 5 (rule ``rank``)."""
        return sorted({f.detail.split("'")[1] for f in self.findings if f.rule == "rank"})

    def count(self, rule):
        """How many findings break ``rule`` (``"rank"``, ``"transpose"``, ``"op"``, ``"dynamic"``...)."""
        return sum(f.rule == rule for f in self.findings)

    def line(self):
        """``"GPU delegate: all N ops"``, or the ops left to the CPU, each with the rule it breaks."""
        if self.whole:
            return f"GPU delegate: all {self.num_ops} ops"
        shown = "; ".join(str(f) for f in self.findings[:8])
        more = f"; and {len(self.findings) - 8} more" if len(self.findings) > 8 else ""
        return f"GPU delegate: {len(self.cpu_ops)} of {self.num_ops} ops left to the CPU: {shown}{more}"

    def to_dict(self):
        return {"path": self.path, "num_ops": self.num_ops, "whole": self.whole, "line": self.line(),
                "findings": [dataclasses.asdict(f) for f in self.findings]}


def _schema():
    try:
        from ai_edge_litert import schema_py_generated as schema  # deferred: optional, LiteRT's own reader
    except ImportError:
        from tensorflow.lite.python import schema_py_generated as schema  # deferred: TensorFlow, as in tflite.py
    return schema


def gpu_delegate_report(path_or_content):
    """Check a ``.tflite`` (a path or its bytes) against the GPU delegate's rules (see the module docstring).

    Returns:
        A :class:`GpuDelegateReport`; ``report.line()`` is the line the export prints.

    Raises:
        ValueError: the file is not a TFLite flatbuffer, or a damaged one (truncated, a header alone, bytes
            that are no flatbuffer): the message names it, never a parser's ``struct.error`` or ``TypeError``.
    """
    if isinstance(path_or_content, (bytes, bytearray)):
        content, path = bytes(path_or_content), "<bytes>"
    else:
        path = os.fspath(path_or_content)
        with open(path, "rb") as f:
            content = f.read()
    if len(content) < 8 or content[4:8] != b"TFL3":
        raise ValueError(f"Not a TFLite flatbuffer (no TFL3 identifier): {path}")
    schema = _schema()
    try:
        model = schema.Model.GetRootAs(content, 0)
        graph = _Graph(schema, model, len(content))
        count = graph.subgraph.OperatorsLength()
        findings = []
        for index in range(count):
            findings.extend(graph.check(index))
        ops = [graph.op_name(i) for i in range(count)]
    except _DAMAGED as error:  # the flatbuffer reader indexes the bytes as they say, unchecked
        raise ValueError(
            f"Damaged TFLite flatbuffer {path} ({len(content):,} bytes; truncated or overwritten?): "
            f"{type(error).__name__}: {error}"
        ) from None
    return GpuDelegateReport(path=path, ops=ops, findings=findings)


# what the flatbuffer reader raises on bytes that are no well-formed model: offsets past the end (struct.error,
# IndexError), a table that is absent (AttributeError on None), a vector that numpy cannot view (ValueError,
# TypeError), a name that is no UTF-8
_DAMAGED = (struct.error, IndexError, AttributeError, TypeError, ValueError, KeyError, OverflowError, UnicodeDecodeError)


class _Graph:
    def __init__(self, schema, model, size):
        if model.SubgraphsLength() < 1:
            raise ValueError("no subgraph")
        self.schema, self.model, self.subgraph = schema, model, model.Subgraphs(0)
        # a vector's length is read from the file: one longer than the file is a damaged length, not a model to
        # walk for billions of steps
        for what, length in (("operators", self.subgraph.OperatorsLength()), ("tensors", self.subgraph.TensorsLength()),
                             ("operator codes", model.OperatorCodesLength()), ("buffers", model.BuffersLength())):
            if length * 4 > size:
                raise ValueError(f"{length:,} {what} in a file of {size:,} bytes")
        self.builtin_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
        self.type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
        # delegates/utils.cc FP16GraphPartitionHelper: a DEQUANTIZE of a float16 constant (float16 weights) is
        # dropped and its consumers read the constant, so its output counts as a constant
        self.fp16_constants = set()
        for index in range(self.subgraph.OperatorsLength()):
            op = self.subgraph.Operators(index)
            if self.op_name(index) == "DEQUANTIZE" and op.InputsLength() == 1 and op.OutputsLength() == 1:
                source = self.subgraph.Tensors(int(op.Inputs(0)))
                if source.Type() == schema.TensorType.FLOAT16 and self._has_data(source):
                    self.fp16_constants.add(int(op.Outputs(0)))

    def opcode(self, index):
        return self.model.OperatorCodes(self.subgraph.Operators(index).OpcodeIndex())

    def op_name(self, index):
        code = self.opcode(index)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == self.schema.BuiltinOperator.CUSTOM:
            return code.CustomCode().decode("utf-8")
        return self.builtin_names.get(builtin, f"BUILTIN_{builtin}")

    def tensor(self, i):
        t = self.subgraph.Tensors(i)
        shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        signature = [int(d) for d in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else shape
        const = self._has_data(t) or i in self.fp16_constants
        return {"name": t.Name().decode("utf-8", "replace"), "shape": shape, "signature": signature,
                "type": self.type_names.get(t.Type(), str(t.Type())), "const": const}

    def _has_data(self, tensor):
        buffer = self.model.Buffers(tensor.Buffer()) if tensor.Buffer() > 0 else None
        return buffer is not None and (buffer.DataLength() > 0 or buffer.Size() > 0)

    def options(self, op, cls_name):
        table = op.BuiltinOptions()
        if table is None:
            return None
        options = getattr(self.schema, cls_name)()
        options.Init(table.Bytes, table.Pos)
        return options

    def check(self, index):
        op = self.subgraph.Operators(index)
        name, version = self.op_name(index), self.opcode(index).Version()
        inputs = [self.tensor(int(i)) for i in op.InputsAsNumpy() if i >= 0] if op.InputsLength() else []
        outputs = [self.tensor(int(i)) for i in op.OutputsAsNumpy() if i >= 0] if op.OutputsLength() else []
        found = []

        def add(rule, detail):
            found.append(Finding(index, name, rule, detail))

        if name not in PARSED_OPS and name not in CUSTOM_OPS:
            add("op", f"{name} is not parsed")
        elif version > MAX_VERSION.get(name, version):
            add("version", f"version {version} > {MAX_VERSION[name]}")
        for t in inputs + outputs:
            if len(t["shape"]) >= 5:
                add("rank", f"tensor {t['name']!r} of rank {len(t['shape'])} {tuple(t['shape'])}")
            if any(d < 0 for d in t["signature"]):
                add("dynamic", f"tensor {t['name']!r} has shape signature {tuple(t['signature'])}")
        self._check_types(name, inputs, outputs, add)
        if name in PARSED_OPS:
            self._check_op(name, op, inputs, outputs, add)
        return found

    def _check_types(self, name, inputs, outputs, add):
        allowed_in, allowed_out = _FLOATS | _QUANT, _FLOATS | _QUANT
        if name in _LOGICAL:
            allowed_out = allowed_out | {"BOOL"}
        if name == "CAST":
            allowed_in, allowed_out = allowed_in | {"BOOL", "INT32"}, allowed_out | {"INT32", "BOOL"}
        if name in ("ONE_HOT", "GATHER"):
            allowed_in = allowed_in | {"INT32"}
        if name in ("SELECT", "SELECT_V2", "LOGICAL_AND"):
            allowed_in = allowed_in | {"BOOL"}
        if name == "LOGICAL_AND":
            allowed_out = allowed_out | {"BOOL"}
        for tensors, allowed in ((inputs, allowed_in), (outputs, allowed_out)):
            for t in tensors:
                if not t["const"] and t["type"] not in allowed:
                    add("type", f"runtime tensor {t['name']!r} is {t['type']}")

    def _check_op(self, name, op, inputs, outputs, add):
        runtime = [t for t in inputs if not t["const"]]
        consts = [t for t in inputs if t["const"]]
        if name == "TRANSPOSE" and inputs and len(inputs[0]["shape"]) not in (2, 3, 4):
            add("transpose", f"permutes {len(inputs[0]['shape'])} axes {tuple(inputs[0]['shape'])}")
        elif name == "BATCH_MATMUL":
            _check_matmul(self.options(op, "BatchMatMulOptions"), inputs, runtime, add)
        elif name in ("STRIDED_SLICE", "SLICE"):
            if name == "STRIDED_SLICE":
                o = self.options(op, "StridedSliceOptions")
                masks = {"ellipsis_mask": o.EllipsisMask(), "new_axis_mask": o.NewAxisMask(),
                         "shrink_axis_mask": o.ShrinkAxisMask()} if o is not None else {}
                for mask, value in masks.items():
                    if value:
                        add("options", f"{mask}={value}")
            if inputs and len(inputs[0]["shape"]) not in (3, 4):
                add("options", f"input of rank {len(inputs[0]['shape'])} (3 or 4 only)")
        elif name == "SOFTMAX":
            o = self.options(op, "SoftmaxOptions")
            if o is not None and o.Beta() != 1.0:
                add("options", f"beta={o.Beta()} (1 only)")
        elif name == "FULLY_CONNECTED":
            o = self.options(op, "FullyConnectedOptions")
            if o is not None and o.WeightsFormat() != 0:
                add("options", f"weights_format={o.WeightsFormat()} (default only)")
            if len(runtime) > 2 or (inputs and inputs[0]["const"]):
                add("options", "a constant input, or more than 2 runtime inputs")
            if o is not None and o.KeepNumDims() and inputs and outputs and len(inputs[0]["shape"]) != len(outputs[0]["shape"]):
                add("options", "keep_num_dims with input and output of different ranks")
        elif name in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"):
            if len(inputs) > 1 and (not inputs[1]["const"] or inputs[1]["type"] != "INT32"):
                add("options", "axes not a constant int32 tensor")
        elif name == "RESHAPE" and len(runtime) != 1:
            add("options", f"{len(runtime)} runtime inputs (1 only: a shape computed at run time is refused)")
        elif name in ("PAD", "PADV2", "MIRROR_PAD") and len(inputs) > 1 and inputs[1]["shape"] not in ([4, 2], [3, 2]):
            add("options", f"paddings of shape {tuple(inputs[1]['shape'])} (4x2 or 3x2 only)")
        elif name == "GATHER" and len(inputs) > 1 and (len(inputs[1]["shape"]) != 1 or inputs[1]["type"] != "INT32"):
            add("options", "indices not 1-D int32")
        if name in _ELEMENTWISE_1 and (len(runtime), len(consts)) != (1, 0):
            add("options", f"{len(runtime)} runtime and {len(consts)} constant inputs (1 runtime only)")
        if name in _ELEMENTWISE_2:
            if (len(runtime), len(consts)) not in ((2, 0), (1, 1)):
                add("options", f"{len(runtime)} runtime and {len(consts)} constant inputs")
            elif name in ("ADD", "MUL") and len(inputs) == 2:
                _check_broadcast(name, inputs[0]["shape"], inputs[1]["shape"], add)


def _check_matmul(options, inputs, runtime, add):
    if options is not None and (options.AdjX() or options.AdjY()):
        add("matmul", f"adj_x={bool(options.AdjX())}, adj_y={bool(options.AdjY())}: the parser reads neither")
    if len(runtime) == 1 and len(inputs) == 2 and not (inputs[1]["const"] and len(inputs[1]["shape"]) == 2):
        add("matmul", "one runtime input and a second that is not a 2-D constant")
    elif len(runtime) not in (1, 2):
        add("matmul", f"{len(runtime)} runtime inputs")


def _check_broadcast(name, a, b, add):
    """``CheckAddMulBroadcastCompatibility`` (enhanced broadcast) and ``MUL``'s "one not smaller" rule."""
    if len(a) > 1 and len(b) > 1 and len(a) != len(b):
        longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
        pairs = zip(reversed(longer), list(reversed(shorter)) + [1] * (len(longer) - len(shorter)))
        if any(x != y and x != 1 and y != 1 for x, y in pairs):
            add("options", f"cannot broadcast {tuple(a)} with {tuple(b)}")
    if name == "MUL" and len(a) == len(b):
        if any(x < y for x, y in zip(a, b)) and any(y < x for x, y in zip(a, b)):
            add("options", f"neither input {tuple(a)}, {tuple(b)} is at least the other in every dimension")
