"""The untrained twin: the model's own architecture and tokenizer with seeded random weights, as a control.

A statistic that a randomly initialised copy of the architecture also reaches says nothing about learning: it
comes from the architecture (position terms, identical tokens having identical embeddings), the tokenizer or
the data (Zhang & Bowman 2018; Hewitt & Liang 2019 make the same point with control tasks). Every analysis
that labels heads can run the same inputs through K such copies and use the distribution of their heads'
statistic as an empirical null: a head is credited only where it beats that too.

A twin is built by the model class itself: ``type(model)._from_config(config)`` constructs the same modules
and ``post_init`` initialises them with the class's own ``_init_weights`` (the initialiser the model was
trained from), under ``torch.manual_seed(seed)`` inside a forked RNG (the caller's random state is left as it
was), on the CPU, then moved to the model's device and dtype. Twin t of a run has seed
:data:`SEED_BASE` + t, so the same model always gets the same twins, on any device. The tokenizer is the
model's own object; the :class:`~probe.models.LoadedModel` fields are the model's (kind, residue format,
contact head, engine), its attention plan is the twin's, and its name says what it is:
``"untrained twin of NAME (seed S)"``. Running a twin is a plain forward of the same architecture: K twins
cost K extra forwards and K copies of the weights in memory, and no new code path in the engine.

:func:`untrained_twins` keeps the twins of a model while the model lives (a weak-key cache), so every unit of
a run reuses them. :func:`parse_control` reads the ``--control`` flag (``untrained[:K]`` or ``none``); it
imports nothing heavy, so a command can check the flag before loading torch.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from probe.errors import ProbeError

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from probe.models import LoadedModel

DEFAULT_TWINS = 3  # K of --control untrained (the default control of probe contacts)
SEED_BASE = 10_000  # twin t is initialised under torch.manual_seed(SEED_BASE + t)
MAX_TWINS = 64
# The twins' bar: this quantile (numpy's default, linear interpolation) of a statistic over every head of
# every twin: `untrained_p99` of probe label, of the contact test and of probe profile (which also reports
# the 1 − UNTRAINED_QUANTILE quantile, for claims that a statistic is low)
UNTRAINED_QUANTILE = 0.99
CONTROL_CHOICES = ("untrained", "untrained:K", "none")

# model -> {(name, revision, engine, seed): twin}: the twins live as long as the model
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Control:
    """A run's control (frozen): ``twins`` untrained twins (0: no control).

    Attributes
    ----------
    twins : int
        How many untrained twins run beside the model; 0 for ``--control none``.

    Examples
    --------
    >>> Control(3).text, Control(0).text
    ('untrained:3', 'none')
    """

    twins: int = DEFAULT_TWINS

    @property
    def text(self) -> str:
        """The flag's value that gives this control: ``"untrained:3"`` or ``"none"``."""
        return f"untrained:{self.twins}" if self.twins else "none"


def parse_control(text: str, flag: str = "--control") -> Control:
    """``"untrained"`` (K = :data:`DEFAULT_TWINS`), ``"untrained:K"`` (1 ≤ K ≤ 64) or ``"none"`` → a
    :class:`Control`; anything else is a one-line :class:`~probe.errors.ProbeError` naming the forms.

    Parameters
    ----------
    text : str
        The flag's value.
    flag : str, default "--control"
        The flag's name, for the message.

    Returns
    -------
    Control

    Examples
    --------
    >>> parse_control("untrained"), parse_control("untrained:5"), parse_control("none")
    (Control(twins=3), Control(twins=5), Control(twins=0))
    >>> parse_control("random")
    Traceback (most recent call last):
    probe.errors.ProbeError: --control 'random': use untrained (K = 3 twins), untrained:K or none
    """
    value = str(text).strip().lower()
    if value == "none":
        return Control(0)
    kind, sep, count = value.partition(":")
    if kind != "untrained":
        raise ProbeError(f"{flag} {text!r}: use untrained (K = {DEFAULT_TWINS} twins), untrained:K or none")
    if not sep:
        return Control(DEFAULT_TWINS)
    if not count.isdigit() or not 1 <= int(count) <= MAX_TWINS:
        raise ProbeError(f"{flag} {text!r}: K must be a whole number of twins from 1 to {MAX_TWINS} "
                         f"(untrained:{DEFAULT_TWINS}), or pass {flag} none")
    return Control(int(count))


def twin_seeds(count: int = DEFAULT_TWINS) -> tuple[int, ...]:
    """The seeds of the first `count` twins: :data:`SEED_BASE` + 0 … count − 1."""
    return tuple(SEED_BASE + index for index in range(count))


def untrained_twin(loaded: LoadedModel, seed: int) -> LoadedModel:
    """One untrained twin of `loaded`: its architecture, tokenizer and fields with the random weights the
    model class initialises under `seed` (deterministic per seed; see the module docstring).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model (what :func:`probe.models.load` returned).
    seed : int
        The seed of ``torch.manual_seed`` for the initialisation.

    Returns
    -------
    probe.models.LoadedModel
        The twin, in eval mode on the model's device and dtype, named ``"untrained twin of NAME (seed S)"``,
        revision ``"untrained:S:REVISION"``.

    Raises
    ------
    ProbeError
        The model is placed by a device map (its twin would need the same placement: run without a control,
        or on one device).

    Examples
    --------
    >>> from probe.untrained import untrained_twin
    >>> loaded = probe.load("zoo:induction")
    >>> twin = untrained_twin(loaded, seed=10000)
    >>> twin.name, twin.revision.startswith("untrained:10000:")
    ('untrained twin of zoo:induction (seed 10000)', True)
    >>> same = untrained_twin(loaded, seed=10000)  # deterministic per seed, and not the trained weights
    >>> first = lambda m: next(m.model.parameters())
    >>> bool(torch.equal(first(twin), first(same))), bool(torch.equal(first(twin), first(loaded)))
    (True, False)
    """
    import torch  # imported here: parse_control must stay import-light for the commands

    from probe.layers import attention_plan, set_engine
    from probe.models import LoadedModel

    source = loaded.model
    if getattr(source, "hf_device_map", None):
        raise ProbeError(f"{loaded.name} is placed with a device map: untrained twins need the model on one "
                         "device (load it with --device), or pass --control none")
    dtype = next(source.parameters()).dtype
    config = copy.deepcopy(source.config)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(int(seed))
        model = type(source)._from_config(config, dtype=dtype)  # post_init: the class's own _init_weights
    model = model.to(loaded.device).eval()
    engine = loaded.engine
    set_engine(model, engine)
    return LoadedModel(model, loaded.tokenizer, loaded.kind, f"untrained twin of {loaded.name} (seed {seed})",
                       f"untrained:{seed}:{loaded.revision}", residue_format=loaded.residue_format,
                       has_contact_head=loaded.has_contact_head,
                       plan=attention_plan(model) if loaded.plan is not None else None, engine=engine)


def untrained_twins(loaded: LoadedModel, count: int = DEFAULT_TWINS) -> tuple[LoadedModel, ...]:
    """The first `count` untrained twins of `loaded` (seeds :func:`twin_seeds`), built once per model and kept
    while the model lives.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model.
    count : int, default 3
        K; 0 gives no twin.

    Returns
    -------
    tuple of probe.models.LoadedModel
        K twins (:func:`untrained_twin`).

    Examples
    --------
    >>> from probe.untrained import untrained_twins
    >>> loaded = probe.load("zoo:induction")
    >>> [twin.name for twin in untrained_twins(loaded, 2)]
    ['untrained twin of zoo:induction (seed 10000)', 'untrained twin of zoo:induction (seed 10001)']
    >>> untrained_twins(loaded, 2)[0] is untrained_twins(loaded, 3)[0]  # built once while the model lives
    True
    """
    built = _CACHE.setdefault(loaded.model, {})
    keys = [(loaded.name, loaded.revision, loaded.engine, seed) for seed in twin_seeds(count)]
    for key in keys:
        if key not in built:
            built[key] = untrained_twin(loaded, key[-1])
    return tuple(built[key] for key in keys)


__all__ = ["CONTROL_CHOICES", "DEFAULT_TWINS", "SEED_BASE", "UNTRAINED_QUANTILE", "Control", "parse_control",
           "twin_seeds", "untrained_twin", "untrained_twins"]
