"""The models the dashboard serves: each spec loaded once per process (`ModelRegistry`), and the default set when
`probe app` gets no --model (`default_models`: the bundled organisms, tiny stand-ins for a missing kind)."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from probe import models
from probe.errors import ProbeError


class ModelRegistry:
    """Each model spec loaded once per process and shared by every session."""

    def __init__(self, specs: Sequence[str], device: str = "cpu", loader: Callable = models.load) -> None:
        if not specs:
            raise ProbeError("no models to show: pass --model")
        self.specs = tuple(dict.fromkeys(specs))
        self.device = device
        self._loader = loader
        self._loaded: dict[str, models.LoadedModel] = {}
        self._lock = threading.Lock()

    def get(self, spec: str) -> models.LoadedModel:
        """The loaded model; only specs given at start-up are accepted (never a path from the browser)."""
        if spec not in self.specs:
            raise ProbeError(f"unknown model {spec!r}: choose one of {', '.join(self.specs)}")
        with self._lock:
            if spec not in self._loaded:
                self._loaded[spec] = self._loader(spec, device=self.device)
            return self._loaded[spec]

    def load_all(self) -> None:
        for spec in self.specs:
            self.get(spec)


def default_models(scratch: str | Path | None = None) -> tuple[str, ...]:
    """The bundled model organisms; a tiny GPT-2 / ESM built into `scratch` stands in for a kind the zoo lacks."""
    import json

    specs: dict[str, str] = {}  # spec -> "text" | "protein"
    try:
        from probe import zoo

        for name in zoo.names():
            config = json.loads((zoo.path(name) / "config.json").read_text())
            specs[f"zoo:{name}"] = "protein" if config.get("model_type") == "esm" else "text"
    except (ImportError, AttributeError, OSError, ValueError):
        pass
    from probe.zoo.tiny import save_tiny

    missing = [(arch, kind) for arch, kind in (("gpt2", "text"), ("esm", "protein")) if kind not in specs.values()]
    if missing:
        scratch = Path(scratch or tempfile.mkdtemp(prefix="probe-app-"))
        for arch, kind in missing:
            specs[str(save_tiny(arch, scratch / f"tiny-{arch}", seed=0))] = kind
    # Text models first (the page opens on the first one), the induction organism before the others.
    preferred = ("zoo:induction", "zoo:coreference", "zoo:positional")
    return tuple(sorted(specs, key=lambda spec: (specs[spec] == "protein",
                                                 preferred.index(spec) if spec in preferred else len(preferred))))
