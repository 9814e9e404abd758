"""The dashboard's service: server-side work shared by every session and thread — captures (cached, one
forward pass at a time through one inference gate), labelling jobs in a background worker that steps aside for
every view between its probe batches, label tables shipped with models, protein results.

Big arrays live here and go to the browser one layer at a time (or as the pooled thumbnails of every head).
Everything a user can get wrong raises a one-line :class:`~probe.errors.ProbeError`. The pieces it is built
from live beside it: `config` (AppConfig), `cache` (LRUCache), `registry` (models), `tables` (files on disk),
`inputs` (parsing), `sinks` (the grid's capture sink), `protein_analysis` (pure protein functions).
"""

from __future__ import annotations

import functools
import hashlib
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from probe import models
from probe.engine import capture, capture_attention
from probe.errors import ProbeError
from probe.heads.label import LabelConfig, label_model
from probe.heads.probesets import delimiter_ids, token_classes
from probe.heads.registry import target_pattern

from . import protein_analysis
from .cache import LRUCache
from .config import AppConfig
from .gate import InferenceGate
from .inputs import parse_fasta, parse_token_ids
from .protein_analysis import ProteinResult
from .registry import ModelRegistry, default_models, display_name
from .sinks import PoolSink
from .tables import one_length, read_heads_summary, read_labels, shipped_labels

CHARS_PER_TOKEN = 16  # explorer text is capped at max_tokens × this many characters before it is tokenized
THUMBNAIL_BINS = 40  # each head's thumbnail in the grid is max-pooled to at most this many rows and columns
# long inputs kept for links: at most this many bytes (UTF-8) in all, oldest evicted
TEXT_STORE_BYTES = 32 * 2**20
REPORT_EVERY_S = 5.0  # a labelling job's progress line in the terminal at most this often


@dataclass(frozen=True)
class TokenInput:
    """One input as the explorer shows it."""

    model: str
    ids: tuple[int, ...]
    tokens: tuple[str, ...]


@dataclass
class LabelJob:
    """Progress of one background labelling run (queued, then running, then done or failed)."""

    done: int = 0
    total: int = 0
    state: str = "queued"  # queued | running | done | failed
    error: str = ""
    started: float | None = None  # time.monotonic() when it began running
    ended: float | None = None
    reported: float = 0.0  # when its last progress line went to the terminal

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left, from the pace so far (None before the first probe batch is done)."""
        if self.state != "running" or self.started is None or self.done <= 0 or self.total <= 0:
            return None
        elapsed = (time.monotonic() if now is None else now) - self.started
        return max(0.0, elapsed / self.done * (self.total - self.done))

    def describe(self, name: str) -> str:
        """One line: "labelling M: 12/40 probe batches, about 30 s left" (or queued, done, failed)."""
        if self.state == "queued":
            return f"{name}: queued for labelling (another model is being labelled first)"
        if self.state == "failed":
            return f"labelling {name} failed: {self.error}"
        if self.state == "done":
            took = f" in {self.ended - self.started:.0f} s" if self.started and self.ended else ""
            return f"labelled every head of {name}{took}"
        eta = self.eta_s()
        left = "estimating the time left" if eta is None else f"about {_duration(eta)} left"
        return f"labelling {name}: {self.done}/{self.total or '?'} probe batches, {left}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class Service:
    """All server-side work of the dashboard; shared by every session and thread."""

    def __init__(self, config: AppConfig, registry: ModelRegistry | None = None,
                 labels: pd.DataFrame | None = None) -> None:
        self.config = config
        self.registry = registry or ModelRegistry(config.models or default_models(), config.device)
        self.gate = InferenceGate()  # one forward pass at a time in the whole process, views before labelling
        self.captures = LRUCache(config.cache_entries, config.cache_bytes)
        self.proteins = LRUCache(8, config.cache_bytes)
        # One protein's APC maps, a layer (every head) per entry: a head step inside a layer, and every user
        # who looks at the same structure with the same model, costs no forward pass.
        self.protein_maps = LRUCache(64, config.cache_bytes)
        self._labels_file = labels if labels is not None else (read_labels(config.labels)
                                                               if config.labels else None)
        self._summary = read_heads_summary(config.heads_summary) if config.heads_summary else None
        self._computed: dict[str, pd.DataFrame] = {}
        self._shipped = {spec: table for spec in self.registry.specs
                         if (table := shipped_labels(spec)) is not None}  # tables shipped with the models
        self._jobs: dict[str, LabelJob] = {}
        self._jobs_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()  # labelling jobs, run one at a time by one worker thread
        self._worker: threading.Thread | None = None
        # where progress lines go (the terminal for probe app)
        self._report: Callable[[str], None] | None = None
        self._texts: OrderedDict[str, str] = OrderedDict()  # long inputs by key, for links (bounded by bytes)
        self._text_bytes = 0
        self._texts_lock = threading.Lock()
        self._classes: dict[str, object] = {}  # TokenClasses per model spec (sentence ends, brackets)
        self._classes_lock = threading.Lock()

    # --- models --------------------------------------------------------------------------------------------

    @property
    def specs(self) -> tuple[str, ...]:
        return self.registry.specs

    def model(self, spec: str) -> models.LoadedModel:
        """The loaded model (a ProbeError naming the reason for a card-only model)."""
        return self.registry.get(spec)

    def unusable(self, spec: str) -> str | None:
        """Why `spec` shows only its card (no tokenizer, not capturable), or None."""
        return self.registry.unusable(spec)

    def kind(self, spec: str) -> str:
        """"causal_lm", "masked_lm", "protein_mlm", … or "card only"."""
        if self.unusable(spec):
            return "card only"
        kind = self.model(spec).kind
        return str(getattr(kind, "value", kind))

    def is_protein(self, spec: str) -> bool:
        return not self.unusable(spec) and self.model(spec).kind == models.ModelKind.PROTEIN_MLM

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
        """A selected-head payload from the browser -> (layer, head) of `spec`, checked; ProbeError
        otherwise."""
        loaded = self.model(spec)
        try:
            layer, head = int(selected["layer"]), int(selected["head"])
        except (TypeError, KeyError, ValueError):
            raise ProbeError(
                f"the selected head {selected!r} is not a layer and a head; click a head again") from None
        if not (0 <= layer < loaded.n_layers and 0 <= head < loaded.n_heads):
            raise ProbeError(f"L{layer}H{head} is not a head of {spec} ({loaded.n_layers} layers × "
                             f"{loaded.n_heads} heads); click a head again")
        return layer, head

    def is_seq2seq(self, spec: str) -> bool:
        """An encoder–decoder (T5, BART): three stacks of attention layers (enc, dec, cross)."""
        return not self.unusable(spec) and self.model(spec).kind == models.ModelKind.SEQ2SEQ_LM

    def head_label(self, spec: str, layer: int, head: int) -> str:
        """The name of a head as shown everywhere: "L3H2", or "enc.L1H2" / "dec.L0H1" / "cross.L0H3" for an
        encoder–decoder (`layer` is the engine's flat layer number)."""
        return self.model(spec).head_name(layer, head)

    def layer_label(self, spec: str, layer: int) -> str:
        """"L3", or "enc.L1" / "dec.L0" / "cross.L0" for an encoder–decoder."""
        loaded = self.model(spec)
        stack, local = loaded.plan.locate(layer) if loaded.plan is not None else ("", layer)
        return f"{stack}.L{local}" if stack else f"L{layer}"

    def layer_names(self, spec: str) -> list[str] | None:
        """Every layer's name by flat layer number for an encoder–decoder (["enc.L0", …, "cross.L2"]); None
        for a single-stack model (its layers are plain "L3")."""
        loaded = self.model(spec)
        if loaded.plan is None or not loaded.plan.is_multi_stack:
            return None
        return [self.layer_label(spec, layer) for layer in range(loaded.n_layers)]

    def stack_of(self, spec: str, layer: int) -> str:
        """"enc", "dec" or "cross" for an encoder–decoder's layer; "" for a single-stack model."""
        loaded = self.model(spec)
        return loaded.plan.locate(layer)[0] if loaded.plan is not None else ""

    def decoder_ids(self, spec: str, ids: Sequence[int]) -> tuple[int, ...]:
        """The decoder's own input ids under teacher forcing: the start token, then `ids` shifted right (what
        the decoder and cross-attention queries read); `ids` itself for a single-stack model."""
        loaded = self.model(spec)
        inputs = _inputs(loaded, self.check_ids(spec, ids))
        if "decoder_input_ids" not in inputs:
            return tuple(ids)
        return tuple(int(i) for i in inputs["decoder_input_ids"][0].tolist())

    def label_refusal(self, spec: str) -> str | None:
        """Why the app labels no head of `spec` (one line), or None: probe label refuses encoder–decoders."""
        if not self.is_seq2seq(spec):
            return None
        return (f"{display_name(spec)} is an encoder–decoder: probe label does not label its heads (no head "
                "type is defined for a sequence-to-sequence model yet), so there is no label table; the "
                "views work")

    def describe(self, spec: str) -> str:
        if self.unusable(spec):
            return f"{display_name(spec)} · card only"
        loaded = self.model(spec)
        kind = getattr(loaded.kind, "value", loaded.kind)  # ModelKind may be a (str, Enum)
        layers = f"{loaded.n_layers} layers"
        if self.layer_names(spec):  # an encoder–decoder: "2 enc + 3 dec + 3 cross layers"
            layers = " + ".join(f"{stack.count} {stack.name}" for stack in loaded.plan.stacks) + " layers"
        return (f"{display_name(spec)} · {kind} · {layers} × {loaded.n_heads} heads · "
                f"revision {loaded.revision}")

    def text_entry_bytes(self) -> int:
        """The longest input a link can keep, in bytes: the longest text the explorer reads (max_tokens × 16
        characters) at 4 bytes a character."""
        return self.config.max_tokens * CHARS_PER_TOKEN * 4

    def save_text(self, text: str) -> str:
        """A short key for a long input, so a link can carry it (kept for this server's lifetime).

        The store is bounded by bytes: an input over `text_entry_bytes()` is refused (a ProbeError, shown in
        the page: no explorer input is that long), and the oldest inputs are evicted beyond
        TEXT_STORE_BYTES."""
        if not isinstance(text, str):
            raise ProbeError("the input is not text; press Run again")
        size = len(text.encode("utf-8", "replace"))
        if size > self.text_entry_bytes():
            raise ProbeError(f"the input is {size:,} bytes; a link keeps inputs up to "
                             f"{self.text_entry_bytes():,} bytes (the explorer reads no longer text): "
                             "shorten it")
        key = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
        with self._texts_lock:
            old = self._texts.pop(key, None)
            if old is not None:
                self._text_bytes -= len(old.encode("utf-8", "replace"))
            self._texts[key] = text
            self._text_bytes += size
            while self._text_bytes > TEXT_STORE_BYTES and len(self._texts) > 1:
                _, dropped = self._texts.popitem(last=False)
                self._text_bytes -= len(dropped.encode("utf-8", "replace"))
        return key

    @property
    def text_bytes(self) -> int:
        """Bytes (UTF-8) of the long inputs kept for links now."""
        with self._texts_lock:
            return self._text_bytes

    def saved_text(self, key: str) -> str | None:
        with self._texts_lock:
            return self._texts.get(str(key))

    # --- explorer -------------------------------------------------------------------------------------------

    def encode(self, spec: str, text: str, as_ids: bool = False) -> TokenInput:
        """Tokenize the explorer's input (text, protein sequence or token ids), within the token cap."""
        loaded = self.model(spec)
        text = text or ""
        cap = self.token_cap(spec)
        if len(text) > cap * CHARS_PER_TOKEN:  # before tokenizing: a 10 MB paste costs nothing
            raise ProbeError(f"the input is {len(text):,} characters; the app takes at most "
                             f"{cap * CHARS_PER_TOKEN:,} ({cap} tokens): shorten it (probe capture writes "
                             "longer inputs to a file)")
        if as_ids:
            ids = parse_token_ids(text, len(loaded.tokenizer))
        elif loaded.kind == models.ModelKind.PROTEIN_MLM:
            ids = models.tokenize_protein(loaded, parse_fasta(text))["input_ids"][0].tolist()
        else:
            if not text.strip():
                raise ProbeError("the input is empty: type a prompt, then press Run")
            ids = loaded.tokenizer(text)["input_ids"]
        if len(ids) > cap:
            raise ProbeError(f"the input is {len(ids)} tokens; the app shows at most {cap} per request: "
                             "shorten it (probe capture writes longer inputs to a file)")
        tokens = loaded.tokenizer.convert_ids_to_tokens(ids)
        return TokenInput(spec, tuple(int(i) for i in ids), tuple(str(t) for t in tokens))

    def check_ids(self, spec: str, ids: Sequence[int]) -> tuple[int, ...]:
        """Token ids that came back from the browser: within the vocabulary and the token cap, or
        ProbeError."""
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
        """α of every head of one layer for one input: [head query key] float32 (cached, inference
        serialised)."""

        loaded = self.model(spec)
        if not 0 <= layer < loaded.n_layers:
            raise ProbeError(f"layer {layer} is out of range: {spec} has layers 0..{loaded.n_layers - 1}")
        if layer not in loaded.attention_layers:  # a hybrid's linear-attention / state-space layer
            kind = dict(loaded.plan.layer_kinds).get(layer, "no softmax attention") if loaded.plan else "no α"
            raise ProbeError(f"layer {layer} of {spec} has no attention weights ({kind}); layers with "
                             f"attention: {', '.join(map(str, loaded.attention_layers))}")
        ids = self.check_ids(spec, ids)
        key = ("layer", spec, ids, layer)
        cached = self.captures.get(key)
        if cached is not None:
            return cached
        with self._inference():
            cached = self.captures.peek(key)  # another thread may have computed it while we waited
            if cached is not None:
                return cached
            # [head query key]
            alpha = capture_attention(loaded.model, _inputs(loaded, ids), layers=[layer])[0, 0]
            alpha = alpha.float().cpu().numpy()
        self.captures.put(key, alpha)
        return alpha

    def thumbnails(self, spec: str, ids: Sequence[int], bins: int = THUMBNAIL_BINS) -> np.ndarray:
        """Every head's α max-pooled to at most `bins` × `bins`: [layer head query_bin key_bin] float32 over
        the layers with α (`attention_layers`: a hybrid's softmax layers), from one forward pass that streams
        each block into the pooled grid (no [layer, head, N, N] tensor is kept)."""
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
            sink = PoolSink(loaded.attention_layers, len(ids), bins)
            with capture(loaded.model, sink), torch.inference_mode():
                loaded.model(**_inputs(loaded, ids))
            pooled = sink.pooled.numpy()  # [layer head query_bin key_bin]
        self.captures.put(key, pooled)
        return pooled

    def _inference(self):
        """The inference gate in the foreground: a labelling job steps aside at its next probe batch."""
        return self.gate.foreground()

    def head_attention(self, spec: str, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
        """One head's α: [query key] float32."""
        layer, head = self.head_of(spec, {"layer": layer, "head": head})
        alpha = self.layer_attention(spec, ids, layer)  # [head query key]
        if not 0 <= head < alpha.shape[0]:
            raise ProbeError(f"head {head} is out of range: {spec} has heads 0..{alpha.shape[0] - 1}")
        return alpha[head]

    def target_pattern(self, spec: str, head_type: str, ids: Sequence[int], layer: int,
                       head: int) -> np.ndarray:
        """The head type's target keys for each query of `spec`'s input: [query key] bool (ProbeError for span
        types: coreference). fixed_offset uses the head's offset from the labels table (all offsets when there
        is none)."""
        loaded = self.model(spec)
        offset = None
        table = self.labels(spec)
        if table is not None and "offset" in table.columns:
            rows = table[(table["head_type"] == head_type) & (table["layer"] == layer)
                         & (table["head"] == head)]
            offset = next((int(value) for value in rows["offset"] if pd.notna(value)), None)
        pattern = target_pattern(head_type, torch.tensor(list(ids), dtype=torch.long),
                                 causal=loaded.kind == models.ModelKind.CAUSAL_LM,
                                 delimiter_ids=delimiter_ids(loaded.tokenizer), candidate=offset,
                                 classes=self._token_classes(spec, loaded, token_classes))  # [query key]
        return pattern.cpu().numpy().astype(bool)

    def _token_classes(self, spec: str, loaded, token_classes):
        """Sentence ends and brackets of the model's tokenizer (one vocabulary scan per model)."""
        with self._classes_lock:
            classes = self._classes.get(spec)
        if classes is None:
            classes = token_classes(loaded.tokenizer)
            with self._classes_lock:
                self._classes[spec] = classes
        return classes

    # --- labels ---------------------------------------------------------------------------------------------

    def labels(self, spec: str) -> pd.DataFrame | None:
        """The labels of one model: computed in this process, else its rows of the --labels table, else the
        table shipped with it (a bundled organism's labels.csv, all-MiniLM-L6-v2's in app/data)."""
        if spec in self._computed:
            return self._computed[spec]
        mine = self._file_rows(spec)
        return mine if mine is not None else self._shipped.get(spec)

    def shipped(self, spec: str) -> bool:
        """Whether `spec` came with a label table (read at start-up; nothing to compute)."""
        return spec in self._shipped

    def _file_rows(self, spec: str) -> pd.DataFrame | None:
        table = self._labels_file
        if table is None:
            return None
        if "model" not in table.columns:
            return one_length(table) if len(self.specs) == 1 else None
        loaded = self.model(spec)
        mine = table[table["model"].astype(str) == spec]
        if mine.empty and "revision" in table.columns:
            mine = table[table["revision"].astype(str) == loaded.revision]
        return one_length(mine) if not mine.empty else None

    def heads_summary(self, spec: str) -> pd.DataFrame | None:
        """The structure-set summary (`probe contacts --heads-summary`) of `spec`: matched by the model name
        or revision it records (a summary that names no model is shown for the only protein model)."""
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
        """(spec, job) of the labelling job running now, else of the next queued one, else None."""
        with self._jobs_lock:
            pending = [(spec, job) for spec, job in self._jobs.items() if job.state in ("running", "queued")]
        return next((item for item in pending if item[1].state == "running"), pending[0] if pending else None)

    def finished_jobs(self) -> int:
        """How many labelling jobs have ended (a counter the page watches to redraw what waited for them)."""
        with self._jobs_lock:
            return sum(job.state in ("done", "failed") for job in self._jobs.values())

    def label_missing(self, report: Callable[[str], None] | None = None) -> list[str]:
        """Queue every text model that has no labels (none shipped, none in --labels) for background
        labelling; the specs queued. `report` gets one-line progress (probe app prints it in the terminal)."""
        if report is not None:
            self._report = report
        missing = [spec for spec in self.registry.usable_specs
                   if not self.is_protein(spec) and self.labels(spec) is None
                   and not self.label_refusal(spec)]
        shipped = [spec for spec in self.registry.usable_specs if self.shipped(spec)]
        if self._report is not None and shipped:
            self._report(f"probe app: labels shipped with {', '.join(map(display_name, shipped))} (nothing "
                         "to compute)")
        if self._report is not None and missing:
            self._report(f"probe app: labelling {', '.join(map(display_name, missing))} in the background; "
                         "the page "
                         "is usable meanwhile")
        for spec in self.registry.usable_specs:
            if self._report is not None and self.label_refusal(spec):
                self._report("probe app: " + self.label_refusal(spec))
        for spec in missing:
            self.start_labelling(spec)
        return missing

    def start_labelling(self, spec: str, run: Callable | None = None) -> LabelJob:
        """Queue labelling every head of `spec` for the background worker (one job at a time, each holding the
        inference gate only between probe batches, so views go first); returns the job to poll."""
        self.model(spec)  # unknown spec: error now, in the request
        with self._jobs_lock:
            job = self._jobs.get(spec)
            if job is not None and job.state in ("queued", "running"):
                return job
            job = self._jobs[spec] = LabelJob()
            self._queue.put(
                (spec, job, run or functools.partial(_label_model, examples=self.config.label_examples)))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="probe-labelling", daemon=True)
                self._worker.start()
        return job

    def _work(self) -> None:
        while True:
            try:
                spec, job, run = self._queue.get(timeout=1.0)
            except queue.Empty:
                with self._jobs_lock:
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            self._label(spec, job, run)

    def _label(self, spec: str, job: LabelJob, run: Callable) -> None:
        job.state, job.started = "running", time.monotonic()
        self._say(spec, job, force=True)
        try:
            with self.gate.background() as turn:
                def progress(done: int, total: int) -> None:
                    job.done, job.total = int(done), int(total)
                    self._say(spec, job)
                    if job.total and job.done >= job.total:
                        turn.release()  # the statistics that follow need no model
                    else:
                        turn.step_aside()  # every waiting view goes first

                table = run(self.model(spec), progress)
            self._computed[spec] = table
            job.state = "done"
        except ProbeError as error:
            job.state, job.error = "failed", str(error)
        except Exception as error:  # noqa: BLE001 - reported in the page, not as a traceback
            job.state, job.error = ("failed",
                                    f"internal error while labelling: {type(error).__name__}: {error}")
        job.ended = time.monotonic()
        self._say(spec, job, force=True)

    def _say(self, spec: str, job: LabelJob, force: bool = False) -> None:
        """A progress line in the terminal: at start and end, and at most every REPORT_EVERY_S meanwhile."""
        now = time.monotonic()
        if self._report is None or not (force or now - job.reported >= REPORT_EVERY_S):
            return
        job.reported = now
        self._report("probe app: " + job.describe(display_name(spec)))

    # --- proteins -------------------------------------------------------------------------------------------

    def protein(self, spec: str, sequence: str | None = None, structure: bytes | None = None,
                filename: str = "", chain: str | None = None) -> tuple[str, ProteinResult]:
        """Predicted contacts (and true ones from an uploaded structure) for one protein; (cache key,
        result)."""
        loaded = self.model(spec)
        if loaded.kind != models.ModelKind.PROTEIN_MLM:
            raise ProbeError(f"{spec} is a {getattr(loaded.kind, 'value', loaded.kind)}; choose a protein "
                             "model (ESM) for contact maps")
        if structure is not None and len(structure) > self.config.upload_bytes:
            raise ProbeError(f"the upload is {len(structure) // 1024} KiB; the limit is "
                             f"{self.config.upload_bytes // 1024} KiB")
        digest = hashlib.sha256(
            b"%s|%s|%s|%s|%s" % (spec.encode(), (sequence or "").encode(), structure or b"",
                                 filename.encode(), (chain or "").encode())).hexdigest()[:20]
        cached = self.proteins.get(digest)
        if cached is not None:
            return digest, cached
        with self._inference():
            result = protein_analysis.analyse(loaded, sequence, structure, filename, chain,
                                              self.config.max_residues)
        self.proteins.put(digest, result)
        return digest, result

    def protein_result(self, key: str) -> ProteinResult:
        result = self.proteins.get(key)
        if result is None:
            raise ProbeError("this protein result has expired from the server's cache; press Run again")
        return result

    def protein_head_map(self, key: str, layer: int, head: int) -> np.ndarray:
        """The selected head's APC-corrected, symmetrised attention over residues: [residue residue].

        Cached per (protein, model, layer): one forward pass gives every head of the layer."""
        result = self.protein_result(key)
        layer, head = self.head_of(result.model, {"layer": layer, "head": head})
        cache_key = ("apc", result.model, key, layer)
        maps = self.protein_maps.get(cache_key)
        if maps is None:
            with self._inference():
                maps = self.protein_maps.peek(cache_key)
                if maps is None:
                    maps = protein_analysis.layer_maps(self.model(result.model), result.sequence, layer)
                    self.protein_maps.put(cache_key, maps)  # [head residue residue]
        return maps[head]


def _inputs(loaded: models.LoadedModel, ids: Sequence[int]) -> dict:
    """One forward pass's inputs over `ids`: an encoder–decoder also gets its teacher-forced decoder ids."""
    import torch

    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=loaded.device)  # [batch query]
    return models.model_inputs(loaded, input_ids, torch.ones_like(input_ids))


def label_config(examples: int):
    """The LabelConfig the app labels with (and its shipped all-MiniLM-L6-v2 table was computed with): the
    default configuration, but `examples` probe examples and no ablation column (it costs ~10 forwards per
    labelled head; `probe label` computes it)."""
    return LabelConfig(examples=examples, ablate="none")


def _label_model(loaded: models.LoadedModel, progress: Callable[[int, int], None],
                 examples: int) -> pd.DataFrame:
    """probe.heads.label.label_model with `label_config(examples)`."""
    return label_model(loaded, label_config(examples), progress=progress)
