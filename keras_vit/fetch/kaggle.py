"""``kaggle://OWNER/MODEL/keras/VARIATION[/VERSION]``: a Kaggle Models handle, fetched (and cached) by ``kagglehub``.

keras-hub's own presets live on Kaggle Models (``kaggle://keras/vit/keras/vit_base_patch16_224_imagenet/4``);
``kagglehub.model_download`` keeps them in its cache (``KAGGLEHUB_CACHE``, by default
``~/.cache/kagglehub/models/OWNER/MODEL/keras/VARIATION/VERSION``), the one keras-hub reads too, and honours
its credentials. ``kagglehub`` is not a dependency of keras_vit: without it a ``kaggle://`` source is refused
with the command that installs it.
"""

from keras_vit.errors import CheckpointError

SCHEME = "kaggle://"


def parse(source):
    """``"kaggle://o/m/keras/v/2"`` -> ``"o/m/keras/v/2"``, the handle kagglehub takes, checked as keras-hub checks it.

    Example:
    >>> parse("kaggle://keras/vit/keras/vit_base_patch16_224_imagenet/4")
    'keras/vit/keras/vit_base_patch16_224_imagenet/4'
    >>> parse("kaggle://keras/vit")
    Traceback (most recent call last):
    ...
    ValueError: Expected kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] (e.g. kaggle://keras/vit/keras/vit_base_patch16_224_imagenet/4). Received: 'kaggle://keras/vit'
    """
    handle = str(source)[len(SCHEME):] if str(source).startswith(SCHEME) else None
    if handle is None or len(handle.split("/")) not in (4, 5) or not all(handle.split("/")):
        raise ValueError(
            "Expected kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] "
            f"(e.g. kaggle://keras/vit/keras/vit_base_patch16_224_imagenet/4). Received: {source!r}"
        )
    return handle


def fetch(source):
    """The local folder of a Kaggle Models handle in kagglehub's cache, downloaded first if needed.

    Raises:
        CheckpointError: kagglehub is not installed (the message says what to install), or it cannot
            fetch the handle (its error quoted).
    """
    handle = parse(source)
    try:
        # deferred: kagglehub, optional (kaggle:// sources only)
        import kagglehub
    except ImportError as error:
        raise CheckpointError(
            f"{source}: reading kaggle:// handles needs the kagglehub package, which is not installed: "
            "`pip install kagglehub` (then it downloads into kagglehub's cache, as keras-hub does). Or download "
            "the preset folder and pass its path."
        ) from error
    try:
        return kagglehub.model_download(handle)
    except Exception as error:  # kagglehub's HTTP, credential and offline errors have no common base class
        raise CheckpointError(f"{source}: kagglehub could not fetch {handle!r}: {type(error).__name__}: {error}") from error
