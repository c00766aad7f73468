"""Looking inside a trained model: attention maps and rollout, intermediate features, figures.

It reads a model's layers through its ``vit_config``; matplotlib is imported only inside the figure
functions. What it may import is the floors' contract (``[importlinter]`` in setup.cfg, docs/architecture.md), checked by ``make test``.
"""
