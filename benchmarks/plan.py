"""Which measurements a run makes: one task (a dict) per measurement."""

from benchmarks import common

SECTIONS = ("limit", "inference", "export", "training", "agreement")
KERAS_RUNTIMES = ("keras-predict", "keras-function", "keras-xla")
ONEDNN_XLA = {"XLA_FLAGS": "--xla_cpu_use_onednn=true"}


def _task(section, module, function, model, runtime, precision, batch_size, peer=None, **extra):
    model_part = model.replace("/", "") if model else "-"
    name = f"{section}/{model_part}/{runtime}/{precision}" + (f"/b{batch_size}" if batch_size else "")
    task = dict(
        name=name, section=section, module=module, function=function, model=model, runtime=runtime,
        precision=precision, batch_size=batch_size,
    )
    if peer:
        task["peer"] = peer
    task.update(extra)
    return task


def limit_tasks(args):
    tasks = []
    for precision in ("float32", "bfloat16"):
        tasks.append(_task("limit", "limit", "tensorflow_gemm", None, "tf-xla", precision, None))
        tasks.append(_task("limit", "limit", "tensorflow_gemm", None, "tf-graph", precision, None))
        tasks.append(_task("limit", "limit", "tensorflow_gemm", None, "tf-xla-onednn", precision, None, env=ONEDNN_XLA))
        tasks.append(_task("limit", "limit", "torch_gemm", None, "torch", precision, None, peer="timm"))
    # OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE may be set on this machine for old OpenBLAS builds; they slow a current one
    tasks.append(_task("limit", "limit", "numpy_gemm", None, "numpy", "float32", None,
                       env={"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}))
    return tasks


def inference_tasks(args):
    tasks = []
    for model in args.models:
        if model == "main":
            continue
        for batch in args.batch_sizes:
            for precision in args.precisions:
                for runtime in args.runtimes:
                    tasks.append(_task("inference", "keras_tasks", "inference", model, runtime, precision, batch))
                if args.onednn_xla:
                    tasks.append(_task("inference", "keras_tasks", "inference", model, "keras-xla-onednn", precision,
                                       batch, env=ONEDNN_XLA, keras_runtime="keras-xla"))
                if precision != "float32" and "keras-function" in args.runtimes:
                    tasks.append(_task("inference", "paired", "speedup", model, "keras-function-paired", precision, batch))
                if args.peers and precision in ("float32", "bfloat16"):
                    tasks.append(_task("inference", "peer_timm", "inference", model, "timm", precision, batch, peer="timm"))
                    for runtime in ("keras-hub", "keras-hub-xla"):  # tf.function with and without XLA: its best counts
                        tasks.append(_task("inference", "peer_kerashub", "inference", model, runtime, precision,
                                           batch, peer="keras-hub"))
    return tasks


def export_tasks(args):
    from benchmarks.export_tasks import RUNTIMES

    tasks = []
    for model in args.export_models:
        for batch in args.export_batch_sizes:
            for runtime in RUNTIMES:
                precision = runtime.split("-", 1)[1] if runtime.startswith("tflite-") else "float32"
                if precision == "dynamic":
                    precision = "dynamic-int8"
                image_size = common.MODELS[model]["image_size"]
                tasks.append(_task("export", "export_tasks", "inference", model, runtime, precision, batch,
                                   image_shape=(image_size, image_size, 3)))
    return tasks


def training_tasks(args):
    tasks = []
    for model in args.train_models:
        batch = args.main_batch_size if model == "main" else args.train_batch_size
        for precision in ("float32", "bfloat16"):
            for runtime in ("keras-fit", "keras-fit-xla"):
                keras_runtime = "keras-xla" if runtime.endswith("xla") else "keras-function"
                tasks.append(_task("training", "keras_tasks", "training", model, runtime, precision, batch,
                                   keras_runtime=keras_runtime))
            if args.peers and model != "main":
                tasks.append(_task("training", "peer_timm", "training", model, "timm", precision, batch, peer="timm"))
    return tasks


def agreement_tasks(args):
    """bfloat16 and int8 against float32 on real images (a trained main-job model)."""
    return [
        _task("agreement", "agreement", "agreement", "main", runtime, precision, None, trained_model=args.trained_model)
        for runtime, precision in (("keras-predict", "bfloat16"), ("keras-predict", "bfloat16-weights"),
                                   ("tflite-dynamic", "dynamic-int8"))
    ]


def gpu_tasks(args):
    """GPU mode: mixed precision + XLA against timm with AMP + ``torch.compile``, same batches."""
    tasks = []
    for model in args.models:
        for batch in args.batch_sizes:
            for precision in ("float32", "float16", "bfloat16"):
                tasks.append(_task("inference", "keras_tasks", "inference", model, "keras-xla", precision, batch, gpu=True))
                tasks.append(_task("inference", "peer_timm", "inference", model, "timm-compile", precision, batch,
                                   peer="timm", gpu=True, compile=True))
        for precision in ("float32", "float16"):
            tasks.append(_task("training", "keras_tasks", "training", model, "keras-fit-xla", precision,
                               args.train_batch_size, keras_runtime="keras-xla", gpu=True))
            tasks.append(_task("training", "peer_timm", "training", model, "timm-compile", precision,
                               args.train_batch_size, peer="timm", gpu=True, compile=True))
    return tasks


def build(args):
    """Every task of the run, in order: the limit first, then the sections asked for."""
    if args.gpu:
        return gpu_tasks(args)
    makers = {"limit": limit_tasks, "inference": inference_tasks, "export": export_tasks, "training": training_tasks,
              "agreement": agreement_tasks}
    tasks = []
    for section in SECTIONS:
        if section in args.only:
            tasks.extend(makers[section](args))
    for task in tasks:
        task.setdefault("keras_runtime", task["runtime"])
    if args.filter:
        tasks = [t for t in tasks if any(part in t["name"] for part in args.filter)]
    return tasks
