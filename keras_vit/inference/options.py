"""The domains of ``predict``'s numeric arguments, in a leaf module without Keras or TensorFlow.

``keras-vit predict --help`` builds its flags' ``argparse`` types from here without starting
TensorFlow; :func:`~keras_vit.inference.predictors.predict` checks its arguments against the same table.

Example:
>>> PREDICT_DOMAINS["top_k"].check(0, "top_k")
Traceback (most recent call last):
...
ValueError: `top_k` must be a positive int. Received: top_k=0
"""

from keras_vit.domains import POSITIVE_INT, Optional

# max_patches: a NaFlex model's budget of patches per image (the grid rule needs at least one)
PREDICT_DOMAINS = {"top_k": POSITIVE_INT, "batch_size": POSITIVE_INT, "max_patches": Optional(POSITIVE_INT)}
