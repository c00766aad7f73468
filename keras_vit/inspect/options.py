"""The choices of the inspection functions' arguments, in a leaf module without Keras or TensorFlow.

``keras-vit attention --help`` lists them without starting TensorFlow; :mod:`keras_vit.inspect.attention`
checks its arguments against the same names.

Example:
>>> HEAD_FUSIONS
('mean', 'max', 'min')
"""

HEAD_FUSIONS = ("mean", "max", "min")  # how attention_rollout combines the heads of a block
