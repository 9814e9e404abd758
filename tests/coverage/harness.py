"""One coverage run: build an entry's tiny model, load it as a user would, capture it, compare with the
references.

For an :class:`~tests.coverage.catalogue.Architecture` :func:`run` saves a seeded tiny random model with its
tokenizer and loads it with :func:`probe.models.load` (what every command does); where that refuses, the
engine is still measured on the model from the checkpoint's own class (what a Python user hands to
:func:`probe.engine.capture`), so an engine that is silently wrong behind a refusing loader still shows. On a
padded batch of 2 it measures

* α of every captured head against eager ``output_attentions`` (valid query rows and keys only), twice: with
  every head captured (the single pass, whose output is computed from the same α) and with one head captured
  (the fused kernel plus α rebuilt from its log-sum-exp). Layers are compared on the engine's layer axis: the
  model's own layer numbers, and for encoder–decoders the encoder, decoder and cross-attention stacks end to
  end;
* the model's logits (or last hidden state) under both captures against its own outputs outside any capture:
  capture must never change what the model computes.

The result is one of four statuses: ``equal`` (through the engine's attention function), ``fallback`` (equal,
with the model running on another implementation inside the capture: the eager fallback), ``refused`` (a
one-line :class:`~probe.errors.ProbeError` from loading or capture), ``FAILS`` (α or logits differ by more
than :data:`TOL`, a layer with eager α missing from the capture or one too many, a crash, or a refusal of
several lines). :func:`render_table` writes ``docs/architectures.md`` from a list of results and
:func:`read_table` parses it back.

What the model's attention function receives (soft-capping, sinks, a position bias) is recorded by running the
model once on a recording function registered with ``AttentionInterface``; it only names the path.
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from probe import models
from probe.engine import ENGINE_NAME, DenseSink, capture
from probe.errors import ProbeError
from probe.zoo.tiny import DEMO_WORDS, esm_tokenizer, word_tokenizer
from tests.coverage.catalogue import ARCHITECTURES, Architecture

TOL = 1e-5
SEED = 0
N_TOKENS = 12  # the longer row of the batch; the shorter one has PADDED fewer real tokens
PADDED = 4
RECORDER = "coverage_record"
STATUSES = ("equal", "fallback", "refused", "FAILS")


@dataclass(frozen=True)
class Result:
    """What one coverage run measured (frozen).

    Attributes
    ----------
    model_type, name : str
        The entry.
    status : {"equal", "fallback", "refused", "FAILS"}
        See the module docstring.
    path : str
        How the engine served it: "fused", "fused + sinks", "softcap blockwise", "eager fallback" or
        "refused".
    alpha_diff, logits_diff : float
        max |α − eager| over captured heads and valid positions, max |logits under capture − logits outside|;
        NaN when not measured.
    note : str
        The variant exercised, the refusal or failure in one line, layers without α.
    peak : float
        The largest eager α on a valid position (near 1: the attention compared is peaked, not uniform); NaN
        when eager did not run.
    seconds : float
        Wall time of the run (build, save, load, five forward passes).
    """

    model_type: str
    name: str
    status: str
    path: str
    alpha_diff: float = math.nan
    logits_diff: float = math.nan
    note: str = ""
    peak: float = math.nan
    seconds: float = 0.0


@dataclass
class _Features:
    """What the attention function received over one forward pass (recorded, not asked of the config)."""

    calls: int = 0
    keywords: set[str] = field(default_factory=set)
    mla: bool = False  # value head size differs from the query/key one


_RECORDING: list[_Features] = []


def _recording_attention(module, query, key, value, attention_mask, **kwargs):  # [batch head query dim] ...
    """A test-only attention function: notes the keywords it receives, then computes like sdpa."""
    features = _RECORDING[-1]
    features.calls += 1
    features.keywords |= {name for name, value_ in kwargs.items() if value_ is not None}
    features.mla |= value.shape[-1] != query.shape[-1]
    kwargs = {name: value_ for name, value_ in kwargs.items() if name in ("dropout", "scaling", "is_causal")}
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _register_recorder() -> None:
    AttentionInterface.register(RECORDER, _recording_attention)
    AttentionMaskInterface.register(RECORDER, sdpa_mask)


# ------------------------------------------------------------------------------------------------------------
# Building and feeding the tiny model
# ------------------------------------------------------------------------------------------------------------


def build(arch: Architecture, directory: Path) -> Path:
    """Save the entry's seeded tiny model and its tokenizer in `directory` (what a downloaded checkpoint
    holds)."""
    config = transformers.CONFIG_MAPPING[arch.model_type](**arch.config)
    torch.manual_seed(SEED)
    model = getattr(transformers, arch.model_class)(config).eval()
    directory.mkdir(parents=True, exist_ok=True)
    if arch.tokenizer == "esm":
        tokenizer = esm_tokenizer(directory)
    else:
        tokenizer = word_tokenizer(DEMO_WORDS, bos_token="<bos>" if arch.padding == "left" else None)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _token_ids(config, rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Seeded ids of ordinary tokens (never pad / bos / eos / mask: ids 4 … vocab − 1) [batch token]."""
    top = min(config.vocab_size, 33 if config.model_type in ("esm", "esmc") else config.vocab_size)
    return torch.randint(4, top - 1, (rows, length), generator=generator)


def _mask(length: int, padding: str) -> torch.Tensor:
    """[batch token] 1 for real tokens: row 0 full, row 1 with PADDED pad positions on the entry's side."""
    mask = torch.ones(2, length, dtype=torch.long)
    if padding == "left":
        mask[1, :PADDED] = 0
    else:
        mask[1, length - PADDED:] = 0
    return mask


def make_inputs(arch: Architecture, model) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the model's keyword inputs, the valid-position mask of each attention stack's queries and keys).

    Stacks: "self" for single-stack models; "encoder", "decoder", "cross" for encoder–decoders, whose decoder
    input (6 tokens, row 1 padded by 2 on the right) is given explicitly."""
    config = model.config
    generator = torch.Generator().manual_seed(SEED)
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    inputs: dict[str, torch.Tensor] = {}
    if arch.inputs == "audio":
        frames = 2 * config.max_source_positions
        inputs["input_features"] = torch.randn(2, config.num_mel_bins, frames, generator=generator)
        encoder_mask = torch.ones(2, config.max_source_positions, dtype=torch.long)
    else:
        encoder_mask = _mask(N_TOKENS, arch.padding)
        ids = _token_ids(config, 2, N_TOKENS, generator).masked_fill(encoder_mask == 0, pad)
        inputs.update(input_ids=ids, attention_mask=encoder_mask)
    if not config.is_encoder_decoder:
        return inputs, {"self": encoder_mask}
    decoder_mask = torch.ones(2, 6, dtype=torch.long)
    decoder_mask[1, 4:] = 0
    decoder_ids = _token_ids(config, 2, 6, generator).masked_fill(decoder_mask == 0, pad)
    inputs.update(decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask)
    return inputs, {"encoder": encoder_mask, "decoder": decoder_mask, "cross": (decoder_mask, encoder_mask)}


def _pairs(valid) -> torch.Tensor:
    """[batch 1 query key] True where the query and the key are both real tokens."""
    queries, keys = valid if isinstance(valid, tuple) else (valid, valid)
    return queries.bool()[:, None, :, None] & keys.bool()[:, None, None, :]


def _output(outputs) -> torch.Tensor:
    """The logits, else the last hidden state: [batch token vocab|width] (float32)."""
    logits = getattr(outputs, "logits", None)
    return (logits if logits is not None else outputs.last_hidden_state).float().cpu()


def _eager_layers(model, inputs, valid: dict) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
    """Eager α of every attention layer on the engine's layer axis, each with its valid pairs [batch 1 query
    key].

    Single-stack models: the model's layers in order (α None where a layer has no softmax attention). Encoder–
    decoders: the encoder's layers, then the decoder's self-attention, then its cross-attention, end to end
    (the engine's numbering of the three stacks)."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(**inputs, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    if not model.config.is_encoder_decoder:
        return [(_on_cpu(alpha), _pairs(valid["self"])) for alpha in out.attentions]
    return [(_on_cpu(alpha), _pairs(valid[stack])) for stack, alphas in (
        ("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
        ("cross", out.cross_attentions))
        for alpha in alphas]


def _record(model, inputs) -> _Features | None:
    """What the attention function receives, or None when the model cannot be switched to a registered one."""
    _register_recorder()
    previous = model.config._attn_implementation
    _RECORDING.append(_Features())
    try:
        model.set_attn_implementation(RECORDER)
        with torch.no_grad():
            model(**inputs)
    except (ValueError, TypeError, RuntimeError, AttributeError):
        return None
    finally:
        model.set_attn_implementation(previous)
        features = _RECORDING.pop()
    return features


# ------------------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------------------


def _one_line(error: BaseException) -> str:
    """An error's message on one line."""
    return " ".join(str(error).split())


class _LayerSink(DenseSink):
    """A DenseSink read layer by layer: the stacks of an encoder–decoder differ in shape, so they cannot be
    stacked on one layer axis the way :meth:`DenseSink.attention` does."""

    def layers_of(self, step: int) -> dict[int, torch.Tensor]:
        """{layer: α [batch head query key]} of one forward pass."""
        return {layer: alpha for (s, layer), alpha in self._store.items() if s == step}


def _capture(model, inputs, heads):
    """(the model's output under capture, the sink, the implementation the model ran on inside the block)."""
    sink = _LayerSink(heads=heads)
    with capture(model, sink), torch.no_grad():
        implementation = model.config._attn_implementation
        out = _output(model(**inputs))
    return out, sink, implementation


def _alpha_diff(sink: _LayerSink, eager: list, heads, n_layers: int) -> tuple[float, list[str]]:
    """max |α − eager| of the sink's heads over valid positions, and what is missing or extra (one string
    each).

    `eager` is what :func:`_eager_layers` returns; `n_layers` the model's layer count (single-stack
    models)."""
    problems: list[str] = []
    captured: dict[int, torch.Tensor] = {}  # layer -> [batch head query key]
    if sink.steps > 1:  # one forward pass was taken for several: its layers cannot be told apart
        problems.append(f"{sink.steps} forward passes captured for one forward")
    elif sink.steps == 1:
        captured = sink.layers_of(0)
    reference = _eager_by_layer(eager, sorted(captured), n_layers)
    if set(captured) != set(reference):
        problems.append(f"captured layers {sorted(captured)}, eager has α for {sorted(reference)}")
    diff = 0.0
    for layer in sorted(set(captured) & set(reference)):
        expected, pairs = reference[layer]
        # [batch head query key]
        expected = expected.float() if heads is None else expected.float()[:, list(heads)]
        ours = captured[layer]
        if ours.shape != expected.shape:
            problems.append(f"layer {layer}: α shaped {tuple(ours.shape)}, eager {tuple(expected.shape)}")
            continue
        diff = max(diff, ((ours - expected).abs() * pairs).nan_to_num(math.inf).max().item())
    return diff, problems


def _eager_by_layer(eager: list, captured: list[int], n_layers: int) -> dict[int, tuple]:
    """Eager (α, valid pairs) by engine layer number. Most models return one entry per layer (None where a
    layer has no softmax attention), encoder–decoders one per layer of each stack; some (LFM2) return the
    attention layers only, which are then paired with the captured layers in order (their count must
    match)."""
    if len(eager) >= n_layers:
        return {layer: entry for layer, entry in enumerate(eager) if entry[0] is not None}
    if len(eager) == len(captured):
        return dict(zip(captured, eager, strict=True))
    return {-1 - index: entry for index, entry in enumerate(eager)}  # unpaired: reported as a mismatch


def _peak(alpha: torch.Tensor, pairs: torch.Tensor) -> float:
    """The largest α on a valid position (`pairs` [batch 1 query key]) of a row with at least 4 valid keys
    (uniform would be ≤ 0.25; a causal model's first rows are 1 by construction and do not count)."""
    rows = pairs.sum(-1, keepdim=True) >= 4  # [batch 1 query 1]
    return float((alpha.float() * (pairs & rows)).max())


def _path(features: _Features | None, implementation: str) -> str:
    if implementation != ENGINE_NAME:
        return "eager fallback"
    keywords = features.keywords if features else set()
    if "softcap" in keywords:
        return "softcap blockwise"
    return "fused + sinks" if "s_aux" in keywords else "fused"


def _variant_note(arch: Architecture, features: _Features | None) -> str:
    parts = [arch.note] if arch.note else []
    if features is not None:
        if "position_bias" in features.keywords:
            parts.append("position bias")
        if features.mla and "MLA" not in arch.note:
            parts.append("value head ≠ query head")
    return "; ".join(dict.fromkeys(parts))


def _on_cpu(alpha: torch.Tensor | None) -> torch.Tensor | None:
    return None if alpha is None else alpha.float().cpu()


def run(arch: Architecture, workdir: str | Path | None = None, device: str = "cpu") -> Result:
    """Build, load, capture and compare one entry (see the module docstring); never raises for the model's
    sake."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        directory = build(arch, Path(workdir or scratch) / arch.model_type)
        result = _measure(arch, directory, device)
    return Result(**{**result.__dict__, "seconds": round(time.perf_counter() - started, 2)})


def _measure(arch: Architecture, directory: Path, device: str) -> Result:
    """Load the saved model as `probe` does and as a Python user does, then capture and compare.

    Two routes, one status: :func:`probe.models.load` (what every command uses) and ``from_pretrained`` on the
    checkpoint's own class, with its default attention implementation (what a user hands to
    :func:`probe.engine.capture`). A load refusal alone makes the entry "refused"; the engine is still
    measured on the model itself, so an engine that is silently wrong behind a refusing loader is still
    FAILS."""

    def result(status: str, path: str, alpha=math.nan, logits=math.nan, *notes: str) -> Result:
        return Result(arch.model_type, arch.name, status, path, alpha, logits,
                      "; ".join(note for note in dict.fromkeys(notes) if note), peak)

    peak = math.nan
    load_refusal = ""
    try:
        model = models.load(str(directory), device=device).model
    except ProbeError as error:
        load_refusal = _refusal(error, "load").replace(str(directory), "DIR")
        model = getattr(transformers, arch.model_class).from_pretrained(directory).to(device).eval()
    except Exception as error:  # noqa: BLE001 - any crash is a finding, recorded in the table
        return result("FAILS", "crash", math.nan, math.nan, _crash(error, "load"))
    inputs, valid = make_inputs(arch, model)
    inputs = {name: tensor.to(device) for name, tensor in inputs.items()}
    with torch.no_grad():
        plain = _output(model(**inputs))  # the model's own implementation: as load() left it, or its default
    eager = _eager_layers(model, inputs, valid)
    peak = max(_peak(alpha, pairs) for alpha, pairs in eager if alpha is not None)
    features = _record(model, inputs)
    note = _variant_note(arch, features)
    n_heads = next(alpha for alpha, _ in eager if alpha is not None).shape[1]
    query_valid = valid.get("self", valid.get("decoder"))
    n_layers = (len(eager) if model.config.is_encoder_decoder
                else model.config.get_text_config().num_hidden_layers)
    alpha_diff, logits_diff, problems, implementation, captured_layers = 0.0, 0.0, [], ENGINE_NAME, []
    for heads in (None, [n_heads - 1]):  # every head: the single pass; one head: kernel + α from its LSE
        try:
            out, sink, implementation = _capture(model, inputs, heads)
            captured_layers = sink.captured_layers if heads is None else captured_layers
        except ProbeError as error:
            refusal = _refusal(error, "capture")
            status = "FAILS" if refusal.endswith(MANY_LINES) else "refused"
            if load_refusal and ROUTING in load_refusal and ROUTING in refusal:
                load_refusal, refusal = load_refusal.replace("load:", "load and capture:"), ""  # one reason
            return result(status, "refused", math.nan, math.nan, load_refusal, refusal, note)
        except Exception as error:  # noqa: BLE001 - any crash is a finding, recorded in the table
            return result("FAILS", "crash", math.nan, math.nan, load_refusal, _crash(error, "capture"), note)
        diff, missing = _alpha_diff(sink, eager, heads, n_layers)
        alpha_diff = max(alpha_diff, diff)
        problems += [problem for problem in missing if problem not in problems]
        gap = (out - plain).abs()[query_valid.bool()].nan_to_num(math.inf)
        logits_diff = max(logits_diff, gap.max().item())
    path = _path(features, implementation)
    if alpha_diff > TOL or logits_diff > TOL or problems:
        wrong = [f"α differs from eager by {alpha_diff:.2g}"] if alpha_diff > TOL else []
        wrong += [f"logits change by {logits_diff:.2g} under capture"] if logits_diff > TOL else []
        wrong = ", ".join(wrong + problems)
        if load_refusal:  # the loader refuses, the engine itself is wrong
            wrong = f"capture() on the model itself: {wrong} ({load_refusal})"
        # the path the engine took, not the one the model needs: sinks or soft-capping it got wrong are not
        # served
        return result("FAILS", _path(None, implementation), alpha_diff, logits_diff, wrong, note)
    if load_refusal:
        return result("refused", "refused", alpha_diff, logits_diff, load_refusal,
                      "capture() on the model itself is equal", note)
    status = "equal" if implementation == ENGINE_NAME else "fallback"
    return result(status, path, alpha_diff, logits_diff, note, _without_alpha(captured_layers, n_layers))


def _without_alpha(captured: list[int], n_layers: int) -> str:
    """"layers 0, 2 have no α" for the layers of a single-stack model the engine gave no α (hybrids), else
    ""."""
    silent = sorted(set(range(n_layers)) - set(captured))
    return f"layers {', '.join(map(str, silent))} have no α (not softmax attention)" if silent else ""


MANY_LINES = "a refusal of several lines"
# the loader's and capture()'s refusal of models outside AttentionInterface
ROUTING = "route attention through"


def _refusal(error: ProbeError, what: str) -> str:
    """`what`: the refusal's reason (its text up to ", so" or the first ";", where consequence and advice
    start)."""
    message = str(error).strip()
    if "\n" in message:
        return f"{what}: {MANY_LINES}"
    return f"{what}: {message.split('; ')[0].split(', so ')[0]}"


def _crash(error: BaseException, what: str) -> str:
    return f"{what} crashed: {type(error).__name__}: {_one_line(error)[:160]}"


def run_all(architectures=ARCHITECTURES, workdir: str | Path | None = None, progress=None,
            device: str = "cpu") -> list[Result]:
    """:func:`run` over the list, in order; `progress(result)` is called after each."""
    results = []
    for arch in architectures:
        results.append(run(arch, workdir, device))
        if progress is not None:
            progress(results[-1])
    return results


# ------------------------------------------------------------------------------------------------------------
# docs/architectures.md
# ------------------------------------------------------------------------------------------------------------

TABLE_HEADER = "| model | model type | status | path | max \\|Δα\\| | max \\|Δlogits\\| | note |"
_ROW = re.compile(r"^\| (?P<name>[^|]+) \| `(?P<model_type>[^`]+)` \| (?P<status>\w+) \| (?P<path>[^|]+) \|")


def _number(value: float) -> str:
    if math.isnan(value):
        return "—"
    return "0" if value == 0 else f"{value:.1e}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(results: list[Result], intro: str) -> str:
    """The markdown page: `intro`, a count of statuses, then one row per result, in list order."""
    counts = {status: sum(result.status == status for result in results) for status in STATUSES}
    summary = ", ".join(f"{count} {status}" for status, count in counts.items())
    lines = [intro.rstrip(), "", f"**{len(results)} model types: {summary}** (transformers "
             f"{transformers.__version__}, torch {torch.__version__.split('+')[0]}).", "", TABLE_HEADER,
             "|---|---|---|---|---|---|---|"]
    for result in results:
        lines.append(f"| {_cell(result.name)} | `{result.model_type}` | {result.status} | {result.path} | "
                     f"{_number(result.alpha_diff)} | {_number(result.logits_diff)} | {_cell(result.note)} |")
    return "\n".join(lines) + "\n"


def read_table(text: str) -> dict[str, tuple[str, str]]:
    """{model type: (status, path)} from a page :func:`render_table` wrote, in its order."""
    rows = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match and match["model_type"] != "model type":
            rows[match["model_type"]] = (match["status"], match["path"].strip())
    return rows
