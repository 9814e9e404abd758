"""Server-side state of the dashboard: the models (loaded once per process), a small LRU cache of captures, one lock
that serialises inference, labelling jobs and protein results.

Big arrays live here and never go to the browser whole: callbacks ask for one head's matrix at a time.
Everything a user can get wrong raises a one-line :class:`~probe.errors.ProbeError`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from probe import models
from probe.classify import TABLE_EXTENSIONS, read_table_file
from probe.errors import ProbeError

LABEL_COLUMNS = ("layer", "head", "head_type", "score")


@dataclass(frozen=True)
class AppConfig:
    """What `probe app` flags set."""

    models: tuple[str, ...] = ()  # model specs; empty: the bundled model organisms (or locally built tiny models)
    labels: str | None = None  # a labels table written by `probe label` (.csv, .parquet or .json)
    device: str = "cpu"
    max_tokens: int = 1024  # longest text input the explorer captures (tokens, special tokens included)
    max_residues: int = 1022  # longest protein the protein view runs
    upload_bytes: int = 5 * 2**20  # largest accepted upload (structure or FASTA)
    cache_bytes: int = 256 * 2**20  # memory budget of the capture cache
    cache_entries: int = 32  # and its entry limit
    label_examples: int = 64  # probe examples per probe set when labelling on demand (probe label --examples)


@dataclass(frozen=True)
class TokenInput:
    """One input as the explorer shows it."""

    model: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]


@dataclass
class LabelJob:
    """Progress of one on-demand labelling run."""

    done: int = 0
    total: int = 0
    state: str = "running"  # running | done | failed
    error: str = ""


@dataclass(frozen=True)
class ProteinResult:
    """Everything the protein panel shows for one sequence (and structure)."""

    model: str
    sequence: str
    predicted: np.ndarray  # [residue residue] contact probabilities
    true: np.ndarray | None  # [residue residue] bool, from the uploaded structure
    heads: pd.DataFrame | None  # per-head precision leaderboard (layer, head, head_name, precision, ...)
    precision: pd.DataFrame | None  # P@L by sequence-separation range
    note: str = ""


class LRUCache:
    """A thread-safe least-recently-used cache of numpy arrays, bounded by entries and by bytes."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
            return None

    def peek(self, key):
        """Like get, but uncounted and without refreshing the entry (for a second look under a lock)."""
        with self._lock:
            return self._items.get(key)

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > 1 and (len(self._items) > self.max_entries or self.nbytes > self.max_bytes):
                self._items.popitem(last=False)

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(value) for value in self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, ProteinResult):
        return value.predicted.nbytes * 2
    return 1024


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
    from probe.tiny import save_tiny

    missing = [(arch, kind) for arch, kind in (("gpt2", "text"), ("esm", "protein")) if kind not in specs.values()]
    if missing:
        scratch = Path(scratch or tempfile.mkdtemp(prefix="probe-app-"))
        for arch, kind in missing:
            specs[str(save_tiny(arch, scratch / f"tiny-{arch}", seed=0))] = kind
    # Text models first (the page opens on the first one), the induction organism before the others.
    preferred = ("zoo:induction", "zoo:coreference", "zoo:positional")
    return tuple(sorted(specs, key=lambda spec: (specs[spec] == "protein",
                                                 preferred.index(spec) if spec in preferred else len(preferred))))


def head_types() -> tuple[str, ...]:
    """Head-type names from probe.patterns (the one registry shared with the CLI)."""
    from probe.patterns import HEAD_TYPES

    return tuple(HEAD_TYPES)


def read_labels(path: str | Path) -> pd.DataFrame:
    """A labels table from `probe label` (.csv, .parquet or .json); checked for the columns the atlas needs."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProbeError(f"--labels {path}: no such file; pass a table written by `probe label`")
    if path.suffix.lower() not in TABLE_EXTENSIONS:
        raise ProbeError(f"--labels {path}: the extension must be one of {', '.join(TABLE_EXTENSIONS)}")
    try:
        table = read_table_file(path)
    except ProbeError as error:
        raise ProbeError(f"--labels {error}; pass a table written by `probe label`") from None
    missing = [column for column in LABEL_COLUMNS if column not in table.columns]
    if missing:
        raise ProbeError(f"--labels {path}: missing columns {', '.join(missing)}; pass a table written by `probe label`")
    return table


def parse_token_ids(text: str, vocab_size: int) -> list[int]:
    """"15 7 22" or "15,7,22" -> [15, 7, 22], each checked against the vocabulary."""
    parts = [part for part in re.split(r"[\s,]+", text.strip()) if part]
    if not parts:
        raise ProbeError("no token ids given: type integers separated by spaces or commas, e.g. 5 17 17 5")
    ids = []
    for part in parts:
        if not part.lstrip("-").isdigit():
            raise ProbeError(f"{part!r} is not a token id: type integers separated by spaces or commas, "
                             "or untick 'token ids' to type text")
        value = int(part)
        if not 0 <= value < vocab_size:
            raise ProbeError(f"token id {value} is out of range: this model's vocabulary is 0..{vocab_size - 1}")
        ids.append(value)
    return ids


def parse_fasta(text: str) -> str:
    """The first record of FASTA text, or a bare sequence; validated amino-acid letters."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if lines and lines[0].startswith(">"):
        body = []
        for line in lines[1:]:
            if line.startswith(">"):
                break
            body.append(line)
        lines = body
    return models.clean_protein("".join(lines))


class Service:
    """All server-side work of the dashboard; shared by every session and thread."""

    def __init__(self, config: AppConfig, registry: ModelRegistry | None = None,
                 labels: pd.DataFrame | None = None) -> None:
        self.config = config
        self.registry = registry or ModelRegistry(config.models or default_models(), config.device)
        self.inference_lock = threading.RLock()  # one forward pass at a time, in the whole process
        self.captures = LRUCache(config.cache_entries, config.cache_bytes)
        self.proteins = LRUCache(8, config.cache_bytes)
        self._labels_file = labels if labels is not None else (read_labels(config.labels) if config.labels else None)
        self._computed: dict[str, pd.DataFrame] = {}
        self._jobs: dict[str, LabelJob] = {}
        self._jobs_lock = threading.Lock()

    # --- models --------------------------------------------------------------------------------------------

    @property
    def specs(self) -> tuple[str, ...]:
        return self.registry.specs

    def model(self, spec: str) -> models.LoadedModel:
        return self.registry.get(spec)

    def describe(self, spec: str) -> str:
        loaded = self.model(spec)
        return (f"{spec} · {loaded.kind} · {loaded.n_layers} layers × {loaded.n_heads} heads · "
                f"revision {loaded.revision}")

    # --- explorer --------------------------------------------------------------------------------------------

    def encode(self, spec: str, text: str, as_ids: bool = False) -> TokenInput:
        """Tokenize the explorer's input (text, protein sequence or token ids), within the token cap."""
        loaded = self.model(spec)
        text = text or ""
        if as_ids:
            ids = parse_token_ids(text, len(loaded.tokenizer))
        elif loaded.kind == "protein_mlm":
            ids = models.tokenize_protein(loaded, parse_fasta(text))["input_ids"][0].tolist()
        else:
            if not text.strip():
                raise ProbeError("the input is empty: type a prompt, then press Run")
            ids = loaded.tokenizer(text)["input_ids"]
        cap = min(self.config.max_tokens, loaded.max_tokens)
        if len(ids) > cap:
            raise ProbeError(f"the input is {len(ids)} tokens; the app shows at most {cap} per request: shorten it "
                             "(probe capture writes longer inputs to a file)")
        tokens = loaded.tokenizer.convert_ids_to_tokens(ids)
        return TokenInput(spec, tuple(int(i) for i in ids), tuple(str(t) for t in tokens))

    def check_ids(self, spec: str, ids: Sequence[int]) -> tuple[int, ...]:
        """Token ids that came back from the browser: within the vocabulary and the token cap, or ProbeError."""
        loaded = self.model(spec)
        cap, vocab = min(self.config.max_tokens, loaded.max_tokens), len(loaded.tokenizer)
        if not ids or len(ids) > cap:
            raise ProbeError(f"the input must have 1 to {cap} tokens; press Run again")
        if not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
            raise ProbeError(f"token ids must lie in 0..{vocab - 1}; press Run again")
        return tuple(ids)

    def tokens(self, spec: str, ids: Sequence[int]) -> tuple[str, ...]:
        return tuple(str(t) for t in self.model(spec).tokenizer.convert_ids_to_tokens(list(ids)))

    def layer_attention(self, spec: str, ids: Sequence[int], layer: int) -> np.ndarray:
        """α of every head of one layer for one input: [head query key] float32 (cached, inference serialised)."""
        import torch

        from probe.capture import capture_attention

        loaded = self.model(spec)
        if not 0 <= layer < loaded.n_layers:
            raise ProbeError(f"layer {layer} is out of range: {spec} has layers 0..{loaded.n_layers - 1}")
        ids = self.check_ids(spec, ids)
        key = ("layer", spec, ids, layer)
        cached = self.captures.get(key)
        if cached is not None:
            return cached
        with self.inference_lock:
            cached = self.captures.peek(key)  # another thread may have computed it while we waited
            if cached is not None:
                return cached
            input_ids = torch.tensor([list(ids)], dtype=torch.long, device=loaded.device)  # [batch query]
            inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
            alpha = capture_attention(loaded.model, inputs, layers=[layer])[0, 0]  # [head query key]
            alpha = alpha.float().cpu().numpy()
        self.captures.put(key, alpha)
        return alpha

    def head_attention(self, spec: str, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
        """One head's α: [query key] float32."""
        alpha = self.layer_attention(spec, ids, layer)  # [head query key]
        if not 0 <= head < alpha.shape[0]:
            raise ProbeError(f"head {head} is out of range: {spec} has heads 0..{alpha.shape[0] - 1}")
        return alpha[head]

    def target_pattern(self, head_type: str, ids: Sequence[int]) -> np.ndarray:
        """The head type's target keys for each query: [query key] bool (ProbeError for span types: coreference)."""
        import torch

        from probe.patterns import target_pattern

        pattern = target_pattern(head_type, torch.tensor(list(ids), dtype=torch.long))  # [query key]
        return pattern.cpu().numpy().astype(bool)

    # --- labels ----------------------------------------------------------------------------------------------

    def labels(self, spec: str) -> pd.DataFrame | None:
        """The labels of one model: computed on demand in this process, else the rows of the --labels table."""
        if spec in self._computed:
            return self._computed[spec]
        table = self._labels_file
        if table is None:
            return None
        if "model" not in table.columns:
            return table if len(self.specs) == 1 else None
        loaded = self.model(spec)
        mine = table[table["model"].astype(str) == spec]
        if mine.empty and "revision" in table.columns:
            mine = table[table["revision"].astype(str) == loaded.revision]
        return mine if not mine.empty else None

    def job(self, spec: str) -> LabelJob | None:
        with self._jobs_lock:
            return self._jobs.get(spec)

    def start_labelling(self, spec: str, run: Callable | None = None) -> LabelJob:
        """Label every head of `spec` in a background thread (inference serialised); returns the job to poll."""
        self.model(spec)  # unknown spec: error now, in the request
        with self._jobs_lock:
            job = self._jobs.get(spec)
            if job is not None and job.state == "running":
                return job
            job = self._jobs[spec] = LabelJob()
        run = run or functools.partial(_label_model, examples=self.config.label_examples)
        thread = threading.Thread(target=self._label, args=(spec, job, run), daemon=True)
        thread.start()
        return job

    def _label(self, spec: str, job: LabelJob, run: Callable) -> None:
        def progress(done: int, total: int) -> None:
            job.done, job.total = int(done), int(total)

        try:
            with self.inference_lock:
                table = run(self.model(spec), progress)
            self._computed[spec] = table
            job.state = "done"
        except ProbeError as error:
            job.state, job.error = "failed", str(error)
        except Exception as error:  # noqa: BLE001 - reported in the page, not as a traceback
            job.state, job.error = "failed", f"internal error while labelling: {type(error).__name__}: {error}"

    # --- proteins --------------------------------------------------------------------------------------------

    def protein(self, spec: str, sequence: str | None = None, structure: bytes | None = None,
                filename: str = "", chain: str | None = None) -> tuple[str, ProteinResult]:
        """Predicted contacts (and true ones from an uploaded structure) for one protein; (cache key, result)."""
        loaded = self.model(spec)
        if loaded.kind != "protein_mlm":
            raise ProbeError(f"{spec} is a {loaded.kind}; choose a protein model (ESM) for contact maps")
        if structure is not None and len(structure) > self.config.upload_bytes:
            raise ProbeError(f"the upload is {len(structure) // 1024} KiB; the limit is "
                             f"{self.config.upload_bytes // 1024} KiB")
        digest = hashlib.sha256(b"%s|%s|%s|%s|%s" % (spec.encode(), (sequence or "").encode(), structure or b"",
                                                      filename.encode(), (chain or "").encode())).hexdigest()[:20]
        cached = self.proteins.get(digest)
        if cached is not None:
            return digest, cached
        from app import proteins

        result = proteins.analyse(self, loaded, sequence, structure, filename, chain)
        self.proteins.put(digest, result)
        return digest, result

    def protein_result(self, key: str) -> ProteinResult:
        result = self.proteins.get(key)
        if result is None:
            raise ProbeError("this protein result has expired from the server's cache; press Run again")
        return result

    def protein_head_map(self, key: str, layer: int, head: int) -> np.ndarray:
        """The selected head's APC-corrected, symmetrised attention over residues: [residue residue]."""
        result = self.protein_result(key)
        cache_key = ("apc", key, layer, head)
        cached = self.captures.get(cache_key)
        if cached is not None:
            return cached
        from app import proteins

        loaded = self.model(result.model)
        with self.inference_lock:
            matrix = proteins.head_map(self, loaded, result.sequence, layer, head)
        self.captures.put(cache_key, matrix)
        return matrix


def _label_model(loaded: models.LoadedModel, progress: Callable[[int, int], None], examples: int) -> pd.DataFrame:
    """probe.classify.label_model with its default configuration (but `examples` probe examples)."""
    from probe.classify import LabelConfig, label_model

    return label_model(loaded, LabelConfig(examples=examples), progress=progress)
