"""Training, cross-validation and full-resolution evaluation: where the data and the model meet.

* :mod:`~pointgeope.engine.config`      typed run configuration (YAML files, ``base:`` includes, overrides)
* :mod:`~pointgeope.engine.checkpoint`  atomic, ``weights_only``-loadable checkpoints
* :mod:`~pointgeope.engine.rng_states`  the generators' states a checkpoint holds, one per rank, and a resumed rank's
* :mod:`~pointgeope.engine.distributed` DDP set-up from the ``torchrun`` environment
* :mod:`~pointgeope.engine.build`       model, optimiser, scheduler, mixed precision and data from a config
* :mod:`~pointgeope.engine.state`       what a fold's checkpoint saves and restores (loop state, learner, RNG)
* :mod:`~pointgeope.engine.train`       one fold, or every fold of ``folds.json`` (``pointgeope train``, ``train.py``)
* :mod:`~pointgeope.engine.evaluate`    per-point predictions by voting over fragments, ``metrics.json``
* :mod:`~pointgeope.engine.predict`     users' scans through a trained model (``pointgeope predict``)
* :mod:`~pointgeope.engine.predict_model` the checkpoint predict loads and its config's overrides
* :mod:`~pointgeope.engine.tensorboard` test rooms' predictions as point clouds at each validation

This ``__init__`` imports nothing heavy. The command line (``pointgeope/commands/``) imports these
modules only inside each command's ``main``.
"""
