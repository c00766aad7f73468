"""keras-hub's ``DeiTBackbone`` (``keras_hub/src/models/deit/``: ``DeiTEmbeddings``, ``DeiTEncoder``) as a row.

Class and distillation tokens, both with position embeddings (one ``(1, N + 2, D)`` table), exact GELU,
``layer_norm_epsilon`` everywhere, ``use_mha_bias`` (False: no attention biases at all), every token after the
final norm; keras_vit's DeiT (``distillation_token``) returns the mean of the two tokens. A
``DeiTImageClassifier``'s head is left out (:func:`task_reason`).
"""

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.conventions import IMAGENET
from keras_vit.weights.keras_hub.family import ATT, Family, Keys, dense, encoder, pair
from keras_vit.weights.mapping import POSEMB_KEY

TASK = "DeiTImageClassifier"


def task_reason(task, path):
    """Why keras_vit leaves out the head of a ``DeiTImageClassifier`` (``task``: its ``config``), or raises when its
    pooling is none keras-hub has. keras-hub's converter ports transformers' ``cls_classifier`` only.

    Example:
    >>> task_reason({"pooling": "token", "num_classes": 1000}, "task.json")[:57]
    "DeiTImageClassifier's head (1000 classes) reads the class"
    """
    pooling = task.get("pooling", "token")
    read = {"token": "reads the class token only", "gap": "reads the mean of every token (the class and distillation tokens too)"}
    if pooling not in read:
        raise CheckpointError(f"{path!r}: config.pooling={pooling!r}; {TASK} pools with 'token' or 'gap'.")
    classes = config_lib.number(task, "num_classes", None, path, integer=True)
    return (f"{TASK}'s head ({classes} classes) {read[pooling]} (task.json pooling={pooling!r}), past a "
            "distillation token; keras_vit's DeiT averages a head on the class token and one on the distillation token, "
            "so its logits would differ. The backbone is loaded (include_top=False: the mean of the two tokens); "
            "the head is not")


def _special(read, found):
    if not read.flag("use_mha_bias", True):
        found.notes.append("config.use_mha_bias=false: no query, key, value or output biases in the attention "
                           "(Keras MultiHeadAttention(use_bias=False)); zeros stand in for the output's")


def _keys(read, depth):
    bias = read.flag("use_mha_bias", True)
    embed, blocks = "layers/dei_t_embeddings", "layers/dei_t_encoder"
    table = {f"{embed}/vars/0": "cls", f"{embed}/vars/1": "dist", f"{embed}/vars/2": POSEMB_KEY,
             **dense(f"{embed}/patch_embedding", "embedding"), **pair(f"{blocks}/layer_norm", "Transformer/encoder_norm")}
    table.update(encoder(f"{blocks}/encoder_layers/dei_t_encoder_block", depth, ("layer_norm_1", "layer_norm_2"), "mha",
                         ("mlp/dense", "output_layer/dense"), bias=bias))
    width = read.number("hidden_dim")
    zeros = {} if bias else {f"Transformer/encoderblock_{i}/{ATT}/out/bias": (width,) for i in range(depth)}
    return Keys(table, zeros=zeros)


FAMILY = Family(
    backbone="DeiTBackbone", converter="DeiTImageConverter", normalization=("ImageNet", IMAGENET),
    fields={"layer_norm_epsilon": ("layer_norm_epsilon", 1e-6), "qkv_bias": ("use_mha_bias", True)},
    switches={"distillation_token": (True, "DeiTEmbeddings: a distillation token after the class token"),
              "pooling": ("token", "DeiTBackbone: every token after the final norm; keras_vit's DeiT reads the class and "
                                   "distillation tokens (their mean)")},
    keys=_keys, special=_special, task=TASK, task_reason=task_reason)
