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
import shutil
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
# device-mapped twin's module -> the finalizer that removes its offload folder
_CLEANUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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


def untrained_bar(values, quantile: float = UNTRAINED_QUANTILE) -> float:
    """The twins' bar: the `quantile` quantile (numpy's linear interpolation) of the finite `values`, NaN when
    none is finite (unknown, never 0). The one definition that probe label (``untrained_p99``), the contact
    test (``untrained_p99_L_r``) and probe profile (``untrained_p99_m``; ``untrained_p01_m`` with
    ``1 - UNTRAINED_QUANTILE``) call.

    Parameters
    ----------
    values : array-like of float, shape=(n,)
        The statistic of every head of every twin (NaN: a head without a value, left out).
    quantile : float, default UNTRAINED_QUANTILE
        Which quantile.

    Returns
    -------
    float
        The bar; NaN without a finite value.

    Examples
    --------
    >>> untrained_bar([0.1, 0.2, float("nan"), 0.3]), untrained_bar([0.1, 0.2, 0.3], 0.5)
    (0.298, 0.2)
    >>> untrained_bar([float("nan")])
    nan
    """
    import numpy as np  # the flag parser above stays free of heavy imports

    found = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = found[np.isfinite(found)]
    return float(np.quantile(finite, quantile)) if len(finite) else float("nan")


def twin_seeds(count: int = DEFAULT_TWINS) -> tuple[int, ...]:
    """The seeds of the first `count` twins: :data:`SEED_BASE` + 0 … count − 1."""
    return tuple(SEED_BASE + index for index in range(count))


def untrained_twin(loaded: LoadedModel, seed: int) -> LoadedModel:
    """One untrained twin of `loaded`: its architecture, tokenizer and fields with the random weights the
    model class initialises under `seed` (deterministic per seed; see the module docstring), placed like the
    model: on its device, or with its device map (each module where the model's is; modules on "disk" in an
    offload folder of the twin's own, removed when the twin is freed).

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model (what :func:`probe.models.load` returned).
    seed : int
        The seed of ``torch.manual_seed`` for the initialisation.

    Returns
    -------
    probe.models.LoadedModel
        The twin, in eval mode on the model's device and dtype (or its device map), named
        ``"untrained twin of NAME (seed S)"``, revision ``"untrained:S:REVISION"``.

    Raises
    ------
    ProbeError
        The class's initialiser leaves a weight unset (it reads another module's weights while building a
        device-mapped twin, or sets no value for a parameter): the twin would not be the class's own.

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
    from probe.layers import attention_plan, set_engine
    from probe.models import LoadedModel

    model = build_twin_model(loaded.model, int(seed), loaded.device)
    engine = loaded.engine
    set_engine(model, engine)
    return LoadedModel(model, loaded.tokenizer, loaded.kind, f"untrained twin of {loaded.name} (seed {seed})",
                       f"untrained:{seed}:{loaded.revision}", residue_format=loaded.residue_format,
                       has_contact_head=loaded.has_contact_head,
                       plan=attention_plan(model) if loaded.plan is not None else None, engine=engine)


def each_twin(loaded: LoadedModel, count: int = DEFAULT_TWINS, keep: bool = False,
              skipped: list[str] | None = None):
    """The first `count` untrained twins of `loaded`, built **one at a time**: each is yielded, then let go
    before the next is built (with ``keep=True`` an in-memory model's twins are cached while it lives, as
    :func:`untrained_twins`; a device-mapped model's never are), so a run's memory holds the model and one
    twin. A twin that cannot be built (its placement does not fit, the class's initialiser leaves a weight
    unset) is skipped with its reason appended to `skipped`; without `skipped` the error is raised.

    Parameters
    ----------
    loaded : probe.models.LoadedModel
        The model.
    count : int, default 3
        K; 0 yields nothing.
    keep : bool, default False
        Cache an in-memory model's twins (for commands that run them once per unit, e.g. per protein).
    skipped : list of str, optional
        Receives "seed S: reason" for each twin that could not be built.

    Yields
    ------
    probe.models.LoadedModel
        Twin t of seed :data:`SEED_BASE` + t, t = 0 … count − 1 (those that were built).

    Examples
    --------
    >>> from probe.untrained import each_twin
    >>> loaded = probe.load("zoo:induction")
    >>> [twin.name for twin in each_twin(loaded, 2)]
    ['untrained twin of zoo:induction (seed 10000)', 'untrained twin of zoo:induction (seed 10001)']
    """
    import torch

    cache = keep and not is_spread(loaded.model)
    for seed in twin_seeds(count):
        try:
            twin = (untrained_twins(loaded, seed - SEED_BASE + 1)[-1] if cache
                    else untrained_twin(loaded, seed))
        except (ProbeError, torch.OutOfMemoryError, MemoryError, OSError) as error:
            if skipped is None:
                raise
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            skipped.append(f"seed {seed}: {reason}")
            continue
        try:
            yield twin
        finally:
            if not cache:  # its offload folder goes now, not whenever the garbage collector finds it
                release(twin)
        del twin  # the next twin is built with this one let go (the caller must not keep it either)


def twin_seed(twin: LoadedModel) -> int:
    """The seed a twin was built under, read from its revision ``"untrained:S:REVISION"`` (what
    :func:`untrained_twin` writes).

    Examples
    --------
    >>> from probe.untrained import twin_seed, untrained_twin
    >>> twin_seed(untrained_twin(probe.load("zoo:induction"), 10001))
    10001
    """
    return int(twin.revision.split(":")[1])


def release(twin: LoadedModel) -> None:
    """Remove a device-mapped twin's weights on disk (its offload folder) now; the twin cannot run after.
    A twin in memory has nothing on disk: nothing happens. (Without a call the folder goes with the twin.)"""
    cleanup = _CLEANUPS.pop(twin.model, None)
    if cleanup is not None:
        cleanup()


def is_spread(model) -> bool:
    """Whether `model` is placed by a device map over more than one place, or with any module on disk."""
    device_map = getattr(model, "hf_device_map", None) or {}
    return len(set(map(str, device_map.values()))) > 1 or "disk" in device_map.values()


def placement_text(model) -> str:
    """How a device-mapped model's twins are placed, for the controls line: "offloaded like the model (1 of 7
    modules on disk)", or "" for a model on one device."""
    if not is_spread(model):
        return ""
    device_map = model.hf_device_map
    disk = sum(where == "disk" for where in device_map.values())
    return (f"offloaded like the model ({disk} of {len(device_map)} modules on disk)" if disk else
            f"placed like the model ({len(device_map)} modules over "
            f"{len(set(map(str, device_map.values())))} devices)")


def build_twin_model(source, seed: int, device):
    """The twin's module: ``type(source)`` built from its config on the meta device, then the class's own
    initialiser (``_init_weights`` in the order of transformers' ``initialize_weights``) under
    ``torch.manual_seed(seed)`` inside a forked RNG, one device-map module at a time (see
    :func:`probe.untrained_build.initialise`); placed like `source` on `device` (its inputs' device)."""
    import torch

    from probe.untrained_build import initialise, offload_root

    config = copy.deepcopy(source.config)
    dtype = next(source.parameters()).dtype
    spread = is_spread(source)
    device_map = dict(source.hf_device_map) if spread else {"": "cpu"}
    with torch.device("meta"):
        model = type(source)._from_config(config, dtype=dtype)
    folder = offload_root(source, seed) if "disk" in device_map.values() else None
    try:
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
            torch.manual_seed(int(seed))
            index = initialise(model, device_map, folder, source)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    if spread:
        from accelerate import dispatch_model

        from probe.quiet import transformers_quiet

        # accelerate's "some parameters are on the meta device" is the placement asked for: collected by the
        # one home of the libraries' output, not printed; main_device as transformers leaves it (accelerate
        # picks the first accelerator, else "cpu")
        with transformers_quiet():
            dispatch_model(model, device_map, offload_dir=folder, offload_index=index)
        model.hf_device_map = device_map
        if folder is not None:
            # the twin's weights on disk go with it (or at release())
            _CLEANUPS[model] = weakref.finalize(model, shutil.rmtree, folder, True)
    else:
        model = model.to(device)
    return model.eval()


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


__all__ = ["CONTROL_CHOICES", "DEFAULT_TWINS", "SEED_BASE", "UNTRAINED_QUANTILE", "Control",
           "build_twin_model", "each_twin", "is_spread", "parse_control", "placement_text", "release",
           "twin_seed", "twin_seeds", "untrained_bar", "untrained_twin", "untrained_twins"]
