"""``hf://ORG/NAME[@revision]``: a Hugging Face Hub repository fetched (and cached) by ``huggingface_hub``.

Only ``config.json``, ``preprocessor_config.json`` and ``.safetensors`` files are
fetched (``snapshot_download`` with ``allow_patterns``), so ``HF_HOME``,
``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and tokens work as with
every Hugging Face library. Pickle weights (``pytorch_model.bin``) are never
downloaded nor read.
"""

from keras_vit.weights.npz import CheckpointError

SCHEME = "hf://"
ALLOW_PATTERNS = ["config.json", "preprocessor_config.json", "*.safetensors", "*.safetensors.index.json"]


def parse(source):
    """``"hf://ORG/NAME@rev"`` -> ``("ORG/NAME", "rev")`` (revision None when absent).

    Example:
    >>> parse("hf://timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k@main")
    ('timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k', 'main')
    """
    if not str(source).startswith(SCHEME):
        raise ValueError(f"A Hugging Face source starts with {SCHEME!r}. Received: {source!r}")
    repo, _, revision = str(source)[len(SCHEME):].partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(f"Expected hf://ORG/NAME[@revision]. Received: {source!r}")
    return repo, revision or None


def fetch(source):
    """The local folder of ``source`` in the Hugging Face cache, downloaded first if needed.

    Raises:
        CheckpointError: the repository or revision does not exist, cannot be
            reached (offline with nothing cached: the message names the cache),
            or publishes no ``.safetensors`` weights.

    Example:
    >>> fetch("hf://timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k")  # doctest: +SKIP
    '/home/me/.cache/huggingface/hub/models--timm--vit_tiny_patch16_224.augreg_in21k_ft_in1k/snapshots/...'
    """
    import os

    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    repo, revision = parse(source)
    try:
        folder = snapshot_download(repo, revision=revision, allow_patterns=ALLOW_PATTERNS)
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise CheckpointError(f"{source}: no such Hugging Face repository or revision ({type(error).__name__}).") from error
    except LocalEntryNotFoundError as error:
        raise CheckpointError(
            f"{source} is not in the Hugging Face cache {constants.HF_HUB_CACHE!r} and the Hub cannot be reached "
            f"(HF_HUB_OFFLINE={int(bool(constants.HF_HUB_OFFLINE))}). Connect once to download it, or set HF_HOME "
            "to a cache that holds it."
        ) from error
    if not any(name.endswith(".safetensors") for name in os.listdir(folder)):
        raise CheckpointError(
            f"{source} publishes no .safetensors weights in this revision: keras_vit never reads pickle files "
            "(pytorch_model.bin, .pth). Use a repository or revision that has model.safetensors."
        )
    return folder
