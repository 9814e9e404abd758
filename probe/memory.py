"""Will it fit? The memory one run needs, computed from the model's config, and a refusal before loading.

    plan = memory_plan(load_config("gpt2"), seq_len=4096, dtype="bfloat16")
    plan.capture, plan.eager     # bytes of a run on the capture engine, and of the eager alternative

:func:`memory_plan` is a pure function of the config (weights, KV cache, activations, logits, the capture's α
block and sinks, the eager alternative's N² attention); :func:`available_memory` reads what the machine has
free (``PROBE_AVAILABLE_MEMORY`` overrides it, for tests); :func:`check_fits` refuses in one line naming the
flags that would make the run fit. ``probe card --seq-len`` prints the plan; ``probe label`` and ``probe
profile`` check it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from probe.card import BYTES_PER_VALUE, architecture_card, config_from_dict, format_bytes, whole_number
from probe.errors import ProbeError

# ------------------------------------------------------------------------------------------------------------

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
GATED_MLP = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
             "gemma3", "gemma3_text", "phi3", "olmo", "olmo2", "cohere", "deepseek_v2", "deepseek_v3",
             "granite", "smollm3")


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes one forward of `batch` sequences of `seq_len` tokens needs, by what holds them (see
    :func:`memory_plan`). ``capture`` is a run on the capture engine; ``eager`` the eager alternative, which
    keeps every layer's α ``[layer batch head query key]`` until the forward returns.

    Attributes
    ----------
    seq_len, batch : int
        Tokens per sequence and sequences per forward.
    dtype : str
        Of the weights and activations.
    parameters : int
        :func:`model_parameters`.
    weights, kv_cache, activations, logits, alpha_block, sinks, eager_attention : int
        Bytes of each; ``capture`` and ``eager`` (properties) add up a run on the engine and an eager one.

    Examples
    --------
    >>> from transformers import GPT2Config
    >>> plan = memory_plan(GPT2Config(), seq_len=1024, batch=8)  # GPT-2 small's config: nothing downloaded
    >>> for field, value in plan.rows():  # what `probe card --seq-len` prints
    ...     print(f"{field:27} {value}")
    memory plan                 8 × 1,024 tokens in float32
      weights                   474 MiB (124,373,760 parameters)
      KV cache                  576 MiB
      activations               288 MiB
      logits                    1.53 GiB
      capture α block + sinks   8.38 MiB + 0 B
      capture run, in all       2.85 GiB
      eager α (all layers, N²)  4.5 GiB
      eager run, in all         7.34 GiB
    """

    seq_len: int
    batch: int
    dtype: str
    parameters: int
    weights: int
    kv_cache: int
    activations: int
    logits: int
    alpha_block: int  # the capture's streamed α block (all heads of a layer, in blocks of at most this)
    sinks: int  # what the sinks keep (scores, profiles), as the command estimates it
    eager_attention: int  # every layer's N² α in the eager alternative
    max_positions: int | None = None  # the positions the model takes (None: not bounded by its config)

    @property
    def capture(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.logits + self.alpha_block + self.sinks

    @property
    def eager(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.logits + self.eager_attention

    def rows(self) -> list[tuple[str, str]]:
        """(field, value) rows for `probe card --seq-len`."""
        return [("memory plan", f"{self.batch} × {self.seq_len:,} tokens in {self.dtype}"),
                ("  weights", f"{format_bytes(self.weights)} ({self.parameters:,} parameters)"),
                ("  KV cache", format_bytes(self.kv_cache)),
                ("  activations", format_bytes(self.activations)),
                ("  logits", format_bytes(self.logits)),
                ("  capture α block + sinks",
                 f"{format_bytes(self.alpha_block)} + {format_bytes(self.sinks)}"),
                ("  capture run, in all", format_bytes(self.capture)),
                ("  eager α (all layers, N²)", format_bytes(self.eager_attention)),
                ("  eager run, in all", format_bytes(self.eager)), *self.beyond_rows()]

    @property
    def beyond_positions(self) -> bool:
        """True when `seq_len` is more than the model's positions: the plan is arithmetic, no run can have
        it."""
        return self.max_positions is not None and self.seq_len > self.max_positions

    def beyond_rows(self) -> list[tuple[str, str]]:
        """The note row when the length is beyond the model's positions (none otherwise)."""
        if not self.beyond_positions:
            return []
        return [("  note", f"the model takes at most {self.max_positions:,} positions: a run of "
                           f"{self.seq_len:,} tokens cannot happen (the bytes above are arithmetic only)")]

    def to_dict(self) -> dict:
        return {**asdict(self), "capture": self.capture, "eager": self.eager}


def model_parameters(config) -> int:
    """Parameters of a transformer from its config: embeddings (+ learned positions, + an untied output head),
    attention (:func:`architecture_card`), MLPs (gated: 3 · hidden · intermediate; else 2 ·; times the experts
    of a mixture) and two norms per layer. An estimate (biases outside attention and extra heads are not
    counted).

    Parameters
    ----------
    config : transformers.PretrainedConfig or dict
        The model's config.

    Returns
    -------
    int
        The estimated parameter count.

    Examples
    --------
    >>> from transformers import GPT2Config
    >>> model_parameters(GPT2Config())  # GPT-2 small: 124,439,808 with its biases and norms' biases
    124373760
    """
    if isinstance(config, dict):
        config = config_from_dict(config)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    card = architecture_card(config)
    hidden, layers = card.hidden_size, card.layers
    vocab = whole_number(config, "vocab_size", default=0, allow_zero=True) or 0
    inner = whole_number(config, "moe_intermediate_size", "intermediate_size", "n_inner", "ffn_dim",
                   default=4 * hidden) or 4 * hidden
    experts = whole_number(config, "num_local_experts", "n_routed_experts", "num_experts", default=1) or 1
    experts += whole_number(config, "n_shared_experts", default=0, allow_zero=True) or 0
    mlp = (3 if card.model_type in GATED_MLP else 2) * hidden * inner * experts
    embeddings = vocab * hidden + (hidden * (card.max_positions or 0) if card.positional.startswith("learned")
                                   else 0)
    head = 0 if getattr(config, "tie_word_embeddings", True) else vocab * hidden
    return embeddings + head + card.attention_parameters + layers * (mlp + 2 * hidden)


def memory_plan(config, seq_len: int, dtype: str | None = None, batch: int = 1, block_bytes: int = 8 * 2**20,
                sink_bytes: int = 0) -> MemoryPlan:
    """The memory a run of `batch` × `seq_len` tokens needs, from the config alone (a pure function).

    Parameters
    ----------
    config : transformers.PretrainedConfig or dict
        The model's config.
    seq_len : int
        Tokens per sequence, N.
    dtype : {"float32", "float16", "bfloat16"} or None
        Weights and activations dtype; None: the config's ``dtype`` / ``torch_dtype``, else float32.
    batch : int
        Sequences per forward, B.
    block_bytes : int
        The capture engine's α block budget (``LabelConfig.block_bytes``, ``ProfileConfig.block_bytes``).
    sink_bytes : int
        What the command's sinks keep.

    Returns
    -------
    MemoryPlan
        With b bytes per value, L layers, H query heads, hidden size D, MLP width F, vocabulary V: weights =
        parameters · b; KV cache = B · N · (values per token of :class:`ArchitectureCard`, windows applied) ·
        b; activations = B · N · (4 D + 2 F) · b (residual, normed input, attention output, MLP hidden);
        logits = B · N · V · 4 (upcast to float32); α block = `block_bytes` + the fused kernel's LSE, B · H ·
        N · 4; eager α = L · B · H · N² · b.

    Examples
    --------
    >>> from transformers import GPT2Config
    >>> plan = memory_plan(GPT2Config(), seq_len=1024, batch=8)  # GPT-2 small
    >>> plan.weights, plan.kv_cache, plan.capture, plan.eager  # bytes: eager keeps every layer's N² α
    (497495040, 603979776, 3059067904, 7882124288)
    """
    if isinstance(config, dict):
        config = config_from_dict(config)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    if seq_len < 1 or batch < 1:
        raise ProbeError(f"the memory plan needs at least 1 token and 1 sequence (got {seq_len} × {batch})")
    stored = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32")
    dtype = dtype or stored.replace("torch.", "")
    if dtype not in DTYPE_BYTES:
        dtype = "float32"
    value = DTYPE_BYTES[dtype]
    card = architecture_card(config)
    parameters = model_parameters(config)
    inner = whole_number(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * card.hidden_size) or 0
    vocab = whole_number(config, "vocab_size", default=0, allow_zero=True) or 0
    kv = card.kv_cache_bytes("fp16", seq_len) // BYTES_PER_VALUE["fp16"] * value * batch
    tokens = batch * seq_len
    return MemoryPlan(seq_len=seq_len, batch=batch, dtype=dtype, parameters=parameters,
                      weights=parameters * value,
                      kv_cache=kv, activations=tokens * (4 * card.hidden_size + 2 * inner) * value,
                      logits=tokens * vocab * 4,
                      alpha_block=block_bytes + batch * card.query_heads * seq_len * 4,
                      sinks=sink_bytes,
                      eager_attention=card.layers * batch * card.query_heads * seq_len * seq_len * value,
                      max_positions=card.max_positions)


def available_memory(device: str = "cpu") -> int | None:
    """Bytes free for a run on `device`: PROBE_AVAILABLE_MEMORY when set (bytes, or with a K/M/G/T suffix:
    "8G"), else a CUDA device's free memory, else the machine's available RAM (psutil, or /proc/meminfo's
    MemAvailable); None when unknown.

    Parameters
    ----------
    device : str, default "cpu"
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.

    Returns
    -------
    int or None
        Bytes.

    Examples
    --------
    >>> import os
    >>> os.environ["PROBE_AVAILABLE_MEMORY"] = "8G"  # what a run may use, when you know better
    >>> available_memory("cpu")
    8589934592
    >>> del os.environ["PROBE_AVAILABLE_MEMORY"]
    """
    text = os.environ.get("PROBE_AVAILABLE_MEMORY", "").strip()
    if text:
        units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        number = text.rstrip("iBb")
        scale = units.get(number[-1:].upper(), 1)
        try:
            return int(float(number[:-1] if scale > 1 else number) * scale)
        except ValueError:
            raise ProbeError(f"PROBE_AVAILABLE_MEMORY={text!r}: give bytes, e.g. 8G or 8589934592") from None
    if str(device).startswith("cuda"):
        import torch  # only to ask a CUDA device for its free memory

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        import psutil  # optional: most installs have it; /proc/meminfo otherwise

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(plan: MemoryPlan, available: int | None, command: str, flags: str) -> None:
    """Refuse a run whose plan exceeds the memory available, in one line naming what would make it fit.

    Raises
    ------
    ProbeError
        ``plan.capture > available``; `flags` names the command's own way to ask less (e.g. "--seq-len").

    Examples
    --------
    >>> from transformers import GPT2Config
    >>> plan = memory_plan(GPT2Config(), seq_len=1024, batch=8)
    >>> check_fits(plan, available=2**30, command="probe label", flags="--seq-len or --batch-size")
    Traceback (most recent call last):
    probe.errors.ProbeError: probe label needs about 2.85 GiB (474 MiB weights, 2.39 GiB for 8 × 1,024 tokens
    in float32) and 1 GiB is available: pass --device-map auto --offload-folder DIR or --dtype bfloat16, or
    --seq-len or --batch-size
    >>> check_fits(plan, available=None, command="probe label", flags="--seq-len")  # unknown: not refused
    """
    if available is None or plan.capture <= available:
        return
    smaller = " or --dtype bfloat16," if plan.dtype == "float32" else ","
    raise ProbeError(
        f"{command} needs about {format_bytes(plan.capture)} ({format_bytes(plan.weights)} weights, "
        f"{format_bytes(plan.capture - plan.weights)} for {plan.batch} × {plan.seq_len:,} tokens in "
        f"{plan.dtype}) and {format_bytes(available)} is available: pass --device-map auto --offload-folder "
        f"DIR{smaller} or {flags}")
