"""``hf://ORG/NAME[@revision]``: a Hugging Face Hub repository fetched (and cached) by ``huggingface_hub``.

Only ``config.json``, ``preprocessor_config.json`` and ``.safetensors`` files, and a keras-hub
preset's JSON files and ``.weights.h5`` (:mod:`keras_vit.weights.keras_hub.preset`), are
fetched (``snapshot_download`` with ``allow_patterns``), so ``HF_HOME``,
``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` and tokens work as with
every Hugging Face library. Pickle weights (``pytorch_model.bin``) are never
downloaded nor read.

Timeouts are huggingface_hub's own, not ``KERAS_VIT_DOWNLOAD_TIMEOUT`` (which is for presets,
:mod:`keras_vit.fetch.transfer`): ``HF_HUB_DOWNLOAD_TIMEOUT`` (each read of a file, 10 s by default)
and ``HF_HUB_ETAG_TIMEOUT`` (a file's metadata, 10 s), read by ``huggingface_hub.constants`` when it
is imported. In huggingface_hub 2.4 the repository listing that ``snapshot_download`` makes first
(``HfApi.repo_info`` in ``_snapshot_download.py``) passes ``timeout=None``: a Hub endpoint that
accepts the connection and never answers that request is not timed out there.
"""

import os

from keras_vit.errors import CheckpointError

SCHEME = "hf://"
ALLOW_PATTERNS = [
    "config.json", "preprocessor_config.json", "*.safetensors", "*.safetensors.index.json",
    # a keras-hub preset (keras_vit.weights.keras_hub.preset)
    "task.json", "image_converter.json", "preprocessor.json", "metadata.json", "*.weights.h5", "model.weights.json",
]


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
            or publishes no ``.safetensors`` weights (nor a keras-hub preset's ``.weights.h5``).

    Example:
    >>> fetch("hf://timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k")  # doctest: +SKIP
    '/home/me/.cache/huggingface/hub/models--timm--vit_tiny_patch16_224.augreg_in21k_ft_in1k/snapshots/...'
    """
    # deferred: huggingface_hub, for an hf:// source only (snapshot_download pulls in its HTTP stack)
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, revision = parse(source)
    try:
        folder = snapshot_download(repo, revision=revision, allow_patterns=ALLOW_PATTERNS)
    except HFValidationError as error:
        raise ValueError(
            f"{source!r} is not a Hugging Face repository id ({error}). Expected hf://ORG/NAME[@revision]."
        ) from error
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise CheckpointError(f"{source}: no such Hugging Face repository or revision ({type(error).__name__}).") from error
    except LocalEntryNotFoundError as error:
        message = offline_message(source, repo, revision, constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE)
        raise CheckpointError(message) from error
    if not any(name.endswith((".safetensors", ".weights.h5")) for name in os.listdir(folder)):
        if constants.HF_HUB_OFFLINE:  # the cache's snapshot, not the repository, is what lacks them
            files = ", ".join(sorted(os.listdir(folder))) or "nothing"
            raise CheckpointError(
                f"The Hugging Face cache's snapshot of {source} ({folder}) holds no .safetensors weights (it has: "
                f"{files}): the cache is incomplete, and HF_HUB_OFFLINE=1 forbids fetching the rest: "
                + offline_message(source, repo, revision, constants.HF_HUB_CACHE, True).partition("forbids downloading it: ")[2]
            )
        raise CheckpointError(
            f"{source} publishes no .safetensors weights in this revision: keras_vit never reads pickle files "
            "(pytorch_model.bin, .pth). Use a repository or revision that has model.safetensors."
        )
    return folder


def offline_message(source, repo, revision, cache, offline):
    """What to do when ``source`` is not in the Hugging Face ``cache`` and cannot be downloaded.

    Example:
    >>> print(offline_message("hf://o/n", "o/n", None, "/hf/hub", True))  # doctest: +NORMALIZE_WHITESPACE
    hf://o/n is not in the Hugging Face cache '/hf/hub', and HF_HUB_OFFLINE=1 forbids downloading it: unset
    HF_HUB_OFFLINE (or set it to 0) where the Hub can be reached, and it is downloaded into the cache once.
    Without network access here, run `hf download o/n --include '*.json' --include '*.safetensors'` where
    there is, then copy that machine's cache folder (HF_HOME/hub) here, or point HF_HOME at a cache that
    holds it.
    """
    if offline:
        why = (
            "and HF_HUB_OFFLINE=1 forbids downloading it: unset HF_HUB_OFFLINE (or set it to 0) where the Hub "
            "can be reached, and it is downloaded into the cache once"
        )
    else:
        why = (
            "and the Hub cannot be reached (no network, HF_ENDPOINT wrong, or no answer within "
            "HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT seconds?)"
        )
    command = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
    return (
        f"{source} is not in the Hugging Face cache {cache!r}, {why}. Without network access here, run "
        f"`{command} --include '*.json' --include '*.safetensors'` where there is, then copy that machine's "
        "cache folder (HF_HOME/hub) here, or point HF_HOME at a cache that holds it."
    )
