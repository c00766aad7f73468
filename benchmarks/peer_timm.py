"""timm (PyTorch, CPU or CUDA) measurements; run with the peer environment's Python.

``make peers`` creates ``.venv-peers`` with torch, torchvision and timm (timm's
import needs torchvision); the suite runs these tasks there as subprocesses,
with torch pinned to the same number of threads as TensorFlow.
"""


from benchmarks import common


def _setup(task):
    import torch

    torch.set_num_threads(int(task.get("threads", 2)))
    torch.set_num_interop_threads(1)
    device = "cuda" if task.get("gpu") else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("GPU mode asked for but torch sees no CUDA device")
    return torch, device


def _model(task, torch, device, num_classes=1000):
    import timm

    if task["model"] in common.REGISTERED:  # its registered head or none, as keras_vit builds it
        size = common.MODELS[task["model"]]["image_size"]
        model = timm.create_model(common.TIMM_NAMES[task["model"]], pretrained=False, img_size=size)
    elif task["model"] in common.TIMM_NAMES:
        model = timm.create_model(common.TIMM_NAMES[task["model"]], pretrained=False, num_classes=num_classes)
    else:  # the tiny --quick model, built to the same shape as keras_vit's
        from timm.models.vision_transformer import VisionTransformer

        c = common.MODELS[task["model"]]
        model = VisionTransformer(
            img_size=c["image_size"], patch_size=c["patch_size"], embed_dim=c["hidden_size"], depth=c["num_layers"],
            num_heads=c["num_heads"], mlp_ratio=c["mlp_dim"] / c["hidden_size"], num_classes=num_classes,
        )
    model = model.to(device)
    if task.get("compile"):
        model = torch.compile(model)
    return model


def _sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def _autocast(task, torch, device):
    if task["precision"] == "float32":
        return torch.autocast(device, enabled=False)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[task["precision"]]
    return torch.autocast(device, dtype=dtype)


def inference(task):
    """Images/s of a timm ViT forward pass under ``torch.inference_mode`` (autocast for bf16)."""
    torch, device = _setup(task)
    model = _model(task, torch, device).eval()
    size = common.MODELS[task["model"]]["image_size"]
    x = torch.rand(int(task["batch_size"]), 3, size, size, device=device)

    def step():
        with torch.inference_mode(), _autocast(task, torch, device):
            model(x)
        _sync(torch, device)

    record = common.measure(task, step)
    record["versions"] = f"torch {torch.__version__}"
    return record


def training(task):
    """Images/s of a timm training step: AdamW, cross-entropy with label smoothing, grad clipping at 1."""
    torch, device = _setup(task)
    model = _model(task, torch, device).train()
    batch = int(task["batch_size"])
    size = common.MODELS[task["model"]]["image_size"]
    x = torch.rand(batch, 3, size, size, device=device)
    y = torch.arange(batch, device=device) % 1000
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    scaler = torch.amp.GradScaler(device, enabled=task["precision"] == "float16")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with _autocast(task, torch, device):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        _sync(torch, device)

    return common.measure(task, step)
