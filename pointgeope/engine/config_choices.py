"""Keys that one choice of optimiser, schedule, loss or test reads and the others never do.

``optim.momentum`` is SGD's (AdamW has none) under the multistep or cosine schedule (the one-cycle schedule
sets SGD's momentum itself every step, ``0.95 -> 0.85 -> 0.95``: torch's ``cycle_momentum``, as Pointcept's
recipe has it), ``optim.milestones`` and ``optim.gamma`` the multistep
schedule's, the ``optim.pct_start``, ``anneal_strategy``, ``div_factor`` and ``final_div_factor`` of the
one-cycle schedule its own, ``train.lovasz_weight`` the ``ce_lovasz`` loss's (:mod:`pointgeope.engine.build`,
:mod:`pointgeope.engine.losses`), ``eval.tta.*`` the PTv1 test's (``eval.protocol: ptv3`` has its own 10 views,
:mod:`pointgeope.engine.evaluate`: refused here, when the config is read, not once the training is done).
One of them set away from its default beside a choice that does not read it is refused (:func:`choice_problem`),
as :mod:`pointgeope.engine.config_values` refuses an encoding's keys beside another encoding: a user who set
``optim.momentum=0.5`` under ``optim.name=adamw`` would believe the run used it. A key set to its default
cannot be told from one left out, so it passes.

A run trained before that refusal may hold such a key in its record (its checkpoint's config). It never
changed a number, so comparing that record with the config that resumes the run skips it where neither the
saved nor the current choice reads it (:func:`unread`, used by ``config_diff.config_differences``): removing the
key, as the refusal says, is also the way to resume, skip or rerun that run.
"""
from __future__ import annotations

from pointgeope.engine.config_yaml import value_text

# key -> its conditions, all of which hold where it is read: (the key whose choice reads it, the choices that
# read it, who they are in words)
READ_BY = {
    "optim.momentum": (("optim.name", ("sgd",), "SGD's"),
                       ("optim.scheduler", ("multistep", "cosine"),
                        "SGD's under a schedule that leaves its momentum (the one-cycle schedule cycles it)")),
    "optim.milestones": (("optim.scheduler", ("multistep",), "the multistep schedule's"),),
    "optim.gamma": (("optim.scheduler", ("multistep",), "the multistep schedule's"),),
    "optim.pct_start": (("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),),
    "optim.anneal_strategy": (("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),),
    "optim.div_factor": (("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),),
    "optim.final_div_factor": (("optim.scheduler", ("onecycle",), "the one-cycle schedule's"),),
    "train.lovasz_weight": (("train.loss", ("ce_lovasz",), "the Lovász-softmax loss's"),),
    "eval.tta.scales": (("eval.protocol", ("ptv1",), "the PTv1 test's"),),
    "eval.tta.flips": (("eval.protocol", ("ptv1",), "the PTv1 test's"),),
    "eval.tta.rotations": (("eval.protocol", ("ptv1",), "the PTv1 test's"),),
}


def _value(cfg, key: str):
    for name in key.split("."):
        cfg = getattr(cfg, name)
    return cfg


def unread(config: dict, key: str) -> bool:
    """Whether ``config`` (a plain dict, as a checkpoint saves it) makes a choice of optimiser, schedule or loss
    under which the dotted ``key`` is never read (a condition of :data:`READ_BY` fails); ``False`` for a key that
    no choice owns. A choosing key that ``config`` lacks counts at its default."""
    from pointgeope.engine.config import Config  # here: config imports this module

    def choice(chooser: str):
        section, name = chooser.split(".")
        choices = config.get(section)
        return choices[name] if isinstance(choices, dict) and name in choices else _value(Config(), chooser)

    return any(choice(chooser) not in readers for chooser, readers, _ in READ_BY.get(key, ()))


def choice_problem(cfg) -> str | None:
    """The first key of :data:`READ_BY` set on ``cfg`` (a ``Config``) away from its default while a key that
    chooses makes it unread, then ``eval.checkpoint: best`` without validation (``train.val_every: 0``: no
    epoch is picked), or ``None``::

        optim.momentum=0.5: SGD's only (optim.name=sgd), but optim.name=adamw, which never reads it; remove it
    """
    defaults = type(cfg)()
    for key, conditions in READ_BY.items():
        value = _value(cfg, key)
        if value == _value(defaults, key):
            continue
        for chooser, readers, whose in conditions:
            if (choice := _value(cfg, chooser)) not in readers:
                return (f"{key}={value_text(value)}: {whose} only ({chooser}={'/'.join(readers)}), "
                        f"but {chooser}={choice}, which never reads it; remove it")
    if cfg.eval.checkpoint == "best" and not cfg.train.val_every:  # best.pt is then every epoch's: the last
        return ("eval.checkpoint=best: the validation's pick (train.val_every=N validates every N epochs), but "
                "train.val_every=0, so best.pt holds the last epoch, as last.pt; set train.val_every=1, or remove it")
    return None
