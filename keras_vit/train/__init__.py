"""Training: datasets and pipelines, augmentation, optimizers and schedules, backups and the resumable fit, the one training job, distribution, recipes.

``data`` (sources, :func:`~keras_vit.train.data.make_pipeline`), ``augment``,
``optimizers`` and ``accumulation``, ``model_setup`` (precision, freezing,
compiling, evaluation), the run's callbacks one job per module -- ``backup``
(the resumable backup, per-epoch weights), ``divergence`` (NaN checks),
``disk_space`` (room before HDF5 writes), ``ema`` (validation on the weight
average), ``progress`` (progress lines, the timer), ``run_files`` (JSON and
CSV files, atomically) -- ``resumable`` (the standard callbacks and
:func:`~keras_vit.train.resumable.fit_resumable`), ``lock`` (one run per
output folder), ``distribute`` (the multi-worker loop and its backups),
``recipes`` (named models and their settings), ``config`` (:class:`~keras_vit.train.config.TrainConfig`,
the domain of each field, the settings a resumed run keeps), ``choices`` (the names a run chooses among) and ``job``
(:func:`~keras_vit.train.job.run`: the job behind ``keras-vit train`` for one
device, mirrored and multi-worker runs).

What it may import is the floors' contract (``[importlinter]`` in setup.cfg, docs/architecture.md), checked by ``make test``.
"""
