"""Keys that one choice of optimiser, schedule or loss reads and the others never do.

``optim.momentum`` is SGD's (AdamW has none), ``optim.milestones`` and ``optim.gamma`` the multistep
schedule's, the ``optim.pct_start``, ``anneal_strategy``, ``div_factor`` and ``final_div_factor`` of the
one-cycle schedule its own, ``train.lovasz_weight`` the ``ce_lovasz`` loss's (:mod:`pointgeope.engine.build`,
:mod:`pointgeope.engine.losses`). One of them set away from its default beside a choice that does not read
it is refused (:func:`choice_problem`), as :mod:`pointgeope.engine.config_values` refuses an encoding's keys
beside another encoding: a user who set ``optim.momentum=0.5`` under ``optim.name=adamw`` would believe the
run used it. A key set to its default cannot be told from one left out, so it passes.

A run trained before that refusal may hold such a key in its record (its checkpoint's config). It never
changed a number, so comparing that record with the config that resumes the run skips it where neither the
saved nor the current choice reads it (:func:`unread`, used by ``checkpoint.config_differences``): removing the
key, as the refusal says, is also the way to resume, skip or rerun that run.
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


def _reads(key: str, choice) -> bool:
    """Whether the optimiser, schedule or loss ``choice`` reads ``key`` (one of :data:`READ_BY`)."""
    return choice in READ_BY[key][1]


def unread(config: dict, key: str) -> bool:
    """Whether ``config`` (a plain dict, as a checkpoint saves it) chooses an optimiser, schedule or loss that
    never reads the dotted ``key``; ``False`` for a key that no choice owns (not in :data:`READ_BY`). A
    choosing key that ``config`` lacks counts at its default."""
    if key not in READ_BY:
        return False
    from pointgeope.engine.config import Config  # here: config imports this module

    chooser = READ_BY[key][0]
    section, name = chooser.split(".")
    choices = config.get(section)
    choice = choices[name] if isinstance(choices, dict) and name in choices else _value(Config(), chooser)
    return not _reads(key, choice)


def choice_problem(cfg) -> str | None:
    """The first key of :data:`READ_BY` set on ``cfg`` (a ``Config``) away from its default while the key
    that chooses reads it otherwise, or ``None``::

        optim.momentum=0.5: SGD's only (optim.name=sgd), but optim.name=adamw, which never reads it; remove it
    """
    defaults = type(cfg)()
    for key, (chooser, readers, whose) in READ_BY.items():
        value, choice = _value(cfg, key), _value(cfg, chooser)
        if value != _value(defaults, key) and not _reads(key, choice):
            return (f"{key}={value}: {whose} only ({chooser}={'/'.join(readers)}), but {chooser}={choice}, which "
                    "never reads it; remove it")
    return None
