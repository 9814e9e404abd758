"""Server-side state of the dashboard: the models (loaded once per process), a small LRU cache of captures, one lock
that serialises inference, labelling jobs and protein results.

Big arrays live here and never go to the browser whole: callbacks ask for one head's matrix at a time (or for
the pooled thumbnails of every head). Everything a user can get wrong raises a one-line
:class:`~probe.errors.ProbeError`. Protein analysis is done by the pure functions of `protein_analysis`; this module
holds the lock around them.
"""

from __future__ import annotations

import functools
import hashlib
import math
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
from probe.errors import ProbeError
from probe.heads.tables import TABLE_EXTENSIONS, read_table_file

from . import protein_analysis
from .protein_analysis import ProteinResult

LABEL_COLUMNS = ("layer", "head", "head_type", "score")
CHARS_PER_TOKEN = 16  # explorer text is capped at max_tokens × this many characters before it is tokenized
THUMBNAIL_BINS = 40  # each head's thumbnail in the grid is max-pooled to at most this many rows and columns
LOCK_PATIENCE_S = 0.25  # how long a view waits for the inference lock before saying a labelling job holds it


class Busy(ProbeError):
    """The inference lock is held by a labelling job: the view says so and is redrawn when the job ends."""


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
    heads_summary: str | None = None  # a per-head structure-set summary from `probe contacts --heads-summary`


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


def _one_length(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of one probe length: a table from `probe label --seq-len 64,256` has a row per length for every head
    and type; the views show the first length it lists (its `stable` column says where the labels flip)."""
    if "seq_len" not in table.columns or table["seq_len"].nunique() <= 1:
        return table
    return table[table["seq_len"] == table["seq_len"].iloc[0]]


def _read_heads_summary(path: str) -> pd.DataFrame:
    """`probe contacts --heads-summary` output, checked by probe.proteins.sets (one-line ProbeError otherwise)."""
    from probe.proteins.sets import read_heads_summary

    return read_heads_summary(path)


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
    from probe.proteins.fasta import parse_fasta as read_records

    _, sequence = read_records(text, "the input")[0]
    return models.clean_protein(sequence)


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
        self._summary = _read_heads_summary(config.heads_summary) if config.heads_summary else None
        self._computed: dict[str, pd.DataFrame] = {}
        self._jobs: dict[str, LabelJob] = {}
        self._jobs_lock = threading.Lock()

    # --- models --------------------------------------------------------------------------------------------

    @property
    def specs(self) -> tuple[str, ...]:
        return self.registry.specs

    def model(self, spec: str) -> models.LoadedModel:
        return self.registry.get(spec)

    def token_cap(self, spec: str) -> int:
        """Longest explorer input for this model, in tokens: --max-tokens or the model's positions."""
        return min(self.config.max_tokens, self.model(spec).max_tokens)

    def limits(self, spec: str) -> str:
        """The input limits of one model, as shown beside Run."""
        loaded = self.model(spec)
        cap = self.token_cap(spec)
        why = "the model's positions" if cap == loaded.max_tokens else "--max-tokens"
        text = f"at most {cap} tokens ({why})"
        if loaded.kind == models.ModelKind.PROTEIN_MLM:
            text += f" · proteins: at most {min(self.config.max_residues, loaded.max_tokens - 2)} residues"
        return text

    def head_of(self, spec: str, selected) -> tuple[int, int]:
        """A selected-head payload from the browser -> (layer, head) of `spec`, checked; ProbeError otherwise."""
        loaded = self.model(spec)
        try:
            layer, head = int(selected["layer"]), int(selected["head"])
        except (TypeError, KeyError, ValueError):
            raise ProbeError(f"the selected head {selected!r} is not a layer and a head; click a head again") from None
        if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
            raise ProbeError(f"L{layer}H{head} is not a head of {spec} ({loaded.n_layers} layers × "
                             f"{loaded.n_heads} heads); click a head again")
        return layer, head

    def describe(self, spec: str) -> str:
        loaded = self.model(spec)
        kind = getattr(loaded.kind, "value", loaded.kind)  # ModelKind may be a (str, Enum)
        return (f"{spec} · {kind} · {loaded.n_layers} layers × {loaded.n_heads} heads · "
                f"revision {loaded.revision}")

    # --- explorer --------------------------------------------------------------------------------------------

    def encode(self, spec: str, text: str, as_ids: bool = False) -> TokenInput:
        """Tokenize the explorer's input (text, protein sequence or token ids), within the token cap."""
        loaded = self.model(spec)
        text = text or ""
        cap = self.token_cap(spec)
        if len(text) > cap * CHARS_PER_TOKEN:  # before tokenizing: a 10 MB paste costs nothing
            raise ProbeError(f"the input is {len(text):,} characters; the app takes at most {cap * CHARS_PER_TOKEN:,} "
                             f"({cap} tokens): shorten it (probe capture writes longer inputs to a file)")
        if as_ids:
            ids = parse_token_ids(text, len(loaded.tokenizer))
        elif loaded.kind == models.ModelKind.PROTEIN_MLM:
            ids = models.tokenize_protein(loaded, parse_fasta(text))["input_ids"][0].tolist()
        else:
            if not text.strip():
                raise ProbeError("the input is empty: type a prompt, then press Run")
            ids = loaded.tokenizer(text)["input_ids"]
        if len(ids) > cap:
            raise ProbeError(f"the input is {len(ids)} tokens; the app shows at most {cap} per request: shorten it "
                             "(probe capture writes longer inputs to a file)")
        tokens = loaded.tokenizer.convert_ids_to_tokens(ids)
        return TokenInput(spec, tuple(int(i) for i in ids), tuple(str(t) for t in tokens))

    def check_ids(self, spec: str, ids: Sequence[int]) -> tuple[int, ...]:
        """Token ids that came back from the browser: within the vocabulary and the token cap, or ProbeError."""
        loaded = self.model(spec)
        cap, vocab = self.token_cap(spec), len(loaded.tokenizer)
        if not isinstance(ids, (list, tuple)) or not ids or len(ids) > cap:
            raise ProbeError(f"the input must have 1 to {cap} tokens; press Run again")
        if not all(isinstance(i, int) and 0 <= i < vocab for i in ids):
            raise ProbeError(f"token ids must lie in 0..{vocab - 1}; press Run again")
        return tuple(ids)

    def tokens(self, spec: str, ids: Sequence[int]) -> tuple[str, ...]:
        return tuple(str(t) for t in self.model(spec).tokenizer.convert_ids_to_tokens(list(ids)))

    def layer_attention(self, spec: str, ids: Sequence[int], layer: int) -> np.ndarray:
        """α of every head of one layer for one input: [head query key] float32 (cached, inference serialised)."""

        from probe.engine import capture_attention

        loaded = self.model(spec)
        if not 0 <= layer < loaded.n_layers:
            raise ProbeError(f"layer {layer} is out of range: {spec} has layers 0..{loaded.n_layers - 1}")
        ids = self.check_ids(spec, ids)
        key = ("layer", spec, ids, layer)
        cached = self.captures.get(key)
        if cached is not None:
            return cached
        with self._inference():
            cached = self.captures.peek(key)  # another thread may have computed it while we waited
            if cached is not None:
                return cached
            alpha = capture_attention(loaded.model, _inputs(loaded, ids), layers=[layer])[0, 0]  # [head query key]
            alpha = alpha.float().cpu().numpy()
        self.captures.put(key, alpha)
        return alpha

    def thumbnails(self, spec: str, ids: Sequence[int], bins: int = THUMBNAIL_BINS) -> np.ndarray:
        """Every head's α max-pooled to at most `bins` × `bins`: [layer head query_bin key_bin] float32, from one
        forward pass that streams each block into the pooled grid (no [layer, head, N, N] tensor is kept)."""
        import torch

        from probe.engine import capture

        loaded = self.model(spec)
        ids = self.check_ids(spec, ids)
        key = ("thumbnails", spec, ids, bins)
        cached = self.captures.get(key)
        if cached is not None:
            return cached
        with self._inference():
            cached = self.captures.peek(key)
            if cached is not None:
                return cached
            sink = PoolSink(loaded.n_layers, len(ids), bins)
            with capture(loaded.model, sink), torch.inference_mode():
                loaded.model(**_inputs(loaded, ids))
            pooled = sink.pooled.numpy()  # [layer head query_bin key_bin]
        self.captures.put(key, pooled)
        return pooled

    def _inference(self):
        """The inference lock; if a labelling job holds it for long, Busy (the page says so, no frozen request)."""
        if self.inference_lock.acquire(timeout=LOCK_PATIENCE_S):
            return _Held(self.inference_lock)
        job = self.running_job()
        if job is not None:
            spec, running = job
            raise Busy(f"waiting for labelling of {spec} to finish ({running.done}/{running.total or '?'}); "
                       "the view updates when it is done")
        self.inference_lock.acquire()
        return _Held(self.inference_lock)

    def head_attention(self, spec: str, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
        """One head's α: [query key] float32."""
        layer, head = self.head_of(spec, {"layer": layer, "head": head})
        alpha = self.layer_attention(spec, ids, layer)  # [head query key]
        if not 0 <= head < alpha.shape[0]:
            raise ProbeError(f"head {head} is out of range: {spec} has heads 0..{alpha.shape[0] - 1}")
        return alpha[head]

    def target_pattern(self, spec: str, head_type: str, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
        """The head type's target keys for each query of `spec`'s input: [query key] bool (ProbeError for span types:
        coreference). fixed_offset uses the head's offset from the labels table (all offsets when there is none)."""
        import torch

        from probe.heads.probesets import delimiter_ids
        from probe.heads.registry import target_pattern

        loaded = self.model(spec)
        offset = None
        table = self.labels(spec)
        if table is not None and "offset" in table.columns:
            rows = table[(table["head_type"] == head_type) & (table["layer"] == layer) & (table["head"] == head)]
            offset = next((int(value) for value in rows["offset"] if pd.notna(value)), None)
        pattern = target_pattern(head_type, torch.tensor(list(ids), dtype=torch.long),
                                 causal=loaded.kind == models.ModelKind.CAUSAL_LM, delimiter_ids=delimiter_ids(loaded.tokenizer),
                                 candidate=offset)  # [query key]
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
            return _one_length(table) if len(self.specs) == 1 else None
        loaded = self.model(spec)
        mine = table[table["model"].astype(str) == spec]
        if mine.empty and "revision" in table.columns:
            mine = table[table["revision"].astype(str) == loaded.revision]
        return _one_length(mine) if not mine.empty else None

    def heads_summary(self, spec: str) -> pd.DataFrame | None:
        """The structure-set summary (`probe contacts --heads-summary`) of `spec`: matched by the model name or
        revision it records (a summary that names no model is shown for the only protein model)."""
        summary = self._summary
        if summary is None:
            return None
        named = {str(summary.attrs.get(key)) for key in ("model", "revision") if summary.attrs.get(key)}
        if named:
            return summary if spec in named or self.model(spec).revision in named else None
        proteins = [s for s in self.specs if self.model(s).kind == models.ModelKind.PROTEIN_MLM]
        return summary if proteins == [spec] else None

    def job(self, spec: str) -> LabelJob | None:
        with self._jobs_lock:
            return self._jobs.get(spec)

    def running_job(self) -> tuple[str, LabelJob] | None:
        """(spec, job) of a labelling job still running, if any."""
        with self._jobs_lock:
            return next(((spec, job) for spec, job in self._jobs.items() if job.state == "running"), None)

    def finished_jobs(self) -> int:
        """How many labelling jobs have ended (a counter the page watches to redraw what waited for them)."""
        with self._jobs_lock:
            return sum(job.state != "running" for job in self._jobs.values())

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
        if loaded.kind != models.ModelKind.PROTEIN_MLM:
            raise ProbeError(f"{spec} is a {getattr(loaded.kind, 'value', loaded.kind)}; choose a protein model (ESM) "
                             "for contact maps")
        if structure is not None and len(structure) > self.config.upload_bytes:
            raise ProbeError(f"the upload is {len(structure) // 1024} KiB; the limit is "
                             f"{self.config.upload_bytes // 1024} KiB")
        digest = hashlib.sha256(b"%s|%s|%s|%s|%s" % (spec.encode(), (sequence or "").encode(), structure or b"",
                                                      filename.encode(), (chain or "").encode())).hexdigest()[:20]
        cached = self.proteins.get(digest)
        if cached is not None:
            return digest, cached
        with self._inference():
            result = protein_analysis.analyse(loaded, sequence, structure, filename, chain, self.config.max_residues)
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
        loaded = self.model(result.model)
        layer, head = self.head_of(result.model, {"layer": layer, "head": head})
        with self._inference():
            matrix = protein_analysis.head_map(loaded, result.sequence, layer, head)
        self.captures.put(cache_key, matrix)
        return matrix


class _Held:
    """Context manager releasing an already-acquired lock."""

    def __init__(self, lock) -> None:
        self._lock = lock

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


def _inputs(loaded: models.LoadedModel, ids: Sequence[int]) -> dict:
    import torch

    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=loaded.device)  # [batch query]
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


class PoolSink:
    """A capture sink that max-pools every head's α into a small grid as the blocks stream by.

    `pooled` is [layer head query_bin key_bin] float32: each cell keeps the strongest weight of its
    factor × factor block of (query, key) pairs, factor = ceil(n / bins). Causal blocks arrive without their all-zero
    key tail (`accepts_causal_crop`), so the engine never computes the masked triangle for the grid.
    """

    accepts_causal_crop = True

    def __init__(self, n_layers: int, n_tokens: int, bins: int) -> None:
        self.factor = max(1, math.ceil(n_tokens / bins))
        self.n_bins = math.ceil(n_tokens / self.factor)
        self.n_layers = n_layers
        self._pooled: dict = {}

    def heads_for(self, layer: int, n_heads: int):
        return range(n_heads)

    def update(self, block) -> None:
        import torch

        alpha = block.alpha[0]  # [head query key] this block's rows; keys beyond alpha.shape[-1] are exactly 0
        heads, rows, keys = alpha.shape
        key_bins = math.ceil(keys / self.factor)
        pad = key_bins * self.factor - keys
        if pad:
            alpha = torch.nn.functional.pad(alpha, (0, pad))  # α ≥ 0, so zero padding never wins a max
        by_key = alpha.reshape(heads, rows, key_bins, self.factor).amax(-1).float()  # [head query key_bin]
        grid = self._pooled.get(block.layer)
        if grid is None:
            grid = self._pooled[block.layer] = torch.zeros(heads, self.n_bins, self.n_bins)
        start = block.query_start
        for row_bin in range(start // self.factor, (start + rows - 1) // self.factor + 1):
            low, high = max(row_bin * self.factor, start) - start, min((row_bin + 1) * self.factor, start + rows) - start
            cell = grid[:, row_bin, :key_bins]  # [head key_bin]
            torch.maximum(cell, by_key[:, low:high].amax(1), out=cell)

    @property
    def pooled(self):
        import torch

        layers = [self._pooled[layer] for layer in sorted(self._pooled)]
        if len(layers) != self.n_layers:
            raise ProbeError("the model's attention was not captured for every layer")
        return torch.stack(layers)  # [layer head query_bin key_bin]


def _label_model(loaded: models.LoadedModel, progress: Callable[[int, int], None], examples: int) -> pd.DataFrame:
    """probe.heads.label.label_model with its default configuration, but `examples` probe examples and no ablation
    column (it costs ~10 forwards per labelled head; `probe label` computes it)."""
    from probe.heads.label import LabelConfig, label_model

    return label_model(loaded, LabelConfig(examples=examples, ablate="none"), progress=progress)
