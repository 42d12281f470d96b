"""Keys that one choice of optimiser, schedule or loss reads and the others never do.

``optim.momentum`` is SGD's (AdamW has none), ``optim.milestones`` and ``optim.gamma`` the multistep
schedule's, the ``optim.pct_start``, ``anneal_strategy``, ``div_factor`` and ``final_div_factor`` of the
one-cycle schedule its own, ``train.lovasz_weight`` the ``ce_lovasz`` loss's (:mod:`pointgeope.engine.build`,
:mod:`pointgeope.engine.losses`). One of them set away from its default beside a choice that does not read
it is refused (:func:`choice_problem`), as :mod:`pointgeope.engine.config_values` refuses an encoding's keys
beside another encoding: a user who set ``optim.momentum=0.5`` under ``optim.name=adamw`` would believe the
run used it. A key set to its default cannot be told from one left out, so it passes.
"""
from __future__ import annotations

# key -> (the key whose choice reads it, the choices that read it, who they are in words)
READ_BY = {
    "optim.momentum": ("optim.name", ("sgd",), "SGD's"),
    "optim.milestones": ("optim.scheduler", ("multistep",), "the multistep schedule's"),
    "optim.gamma": ("optim.scheduler", ("multistep",), "the multistep schedule's"),
    "optim.pct_start": ("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),
    "optim.anneal_strategy": ("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),
    "optim.div_factor": ("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),
    "optim.final_div_factor": ("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),
    "train.lovasz_weight": ("train.loss", ("ce_lovasz",), "the Lovász-softmax loss's"),
}


def _value(cfg, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def choice_problem(cfg) -> str | None:
    """The first key of :data:`READ_BY` set on ``cfg`` (a ``Config``) away from its default while the key
    that chooses reads it otherwise, or ``None``::

        optim.momentum=0.5: SGD's only (optim.name=sgd), but optim.name=adamw, which never reads it; remove it
    """
    defaults = type(cfg)()
    for key, (chooser, readers, whose) in READ_BY.items():
        value, choice = _value(cfg, key), _value(cfg, chooser)
        if value != _value(defaults, key) and choice not in readers:
            return (f"{key}={value}: {whose} only ({chooser}={'/'.join(readers)}), but {chooser}={choice}, which "
                    "never reads it; remove it")
    return None
