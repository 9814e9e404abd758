"""The architecture card: what a model's attention is, read from its config alone.

    card = architecture_card(transformers.AutoConfig.from_pretrained("gpt2"))
    card.attention        # "MHA" | "GQA" | "MQA" | "MLA"
    card.kv_cache_bytes("bf16", 32768)

Variants (query heads H, key/value heads G, head dimension d, layers n):

* MHA — every query head has its own key and value head (G = H).
* GQA — G < H key/value heads, each shared by H / G query heads (Ainslie et al. 2023); MQA is G = 1 (Shazeer
  2019).
* MLA — multi-head latent attention (DeepSeek-V2): keys and values are up-projected per head from one shared
  latent of `kv_lora_rank` dimensions, plus one decoupled rotary key of `qk_rope_head_dim` dimensions shared
  by all heads. The cache holds only the latent and that rotary key: (kv_lora_rank + qk_rope_head_dim) values
  per token and layer.

KV-cache bytes count keys and values of every layer: n · G · (d_k + d_v) values per token (MLA: the latent +
rope key above); a layer with a sliding window of W tokens keeps at most W tokens. Parameters in attention
count the Q, K, V and output projections (weights and biases; for MLA also the low-rank projections and their
RMSNorm weights) — nothing else (no layer norms around the block, no embeddings).

Training domain (:func:`training_domain`): what the checkpoint was trained on, where its family says so,
matched on the checkpoint's name (``_name_or_path``) and model_type by :data:`DOMAINS`; ``unknown`` otherwise
(a renamed or fine-tuned checkpoint is not guessed).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from probe.errors import ProbeError

BYTES_PER_VALUE = {"fp16": 2, "bf16": 2, "fp8": 1}
CONTEXTS = {"4K": 4096, "32K": 32768, "128K": 131072}
# Families whose q/k/v/o projections carry biases whatever the config says.
BIASED = ("gpt2", "bert", "roberta", "xlm-roberta", "esm", "distilbert", "camembert", "electra", "gpt_neox",
          "bloom", "opt", "gpt_neo", "gptj")
ALIBI = ("bloom", "mpt", "falcon_alibi")
UNKNOWN_DOMAIN = "unknown"
ANTIBODY = "antibody"  # the domain kind of antibody language models (probe.proteins.domain checks the input)
# (kind, name fragments (lower case; any matches), model_types (empty: any), what its paper says it saw)
DOMAINS = (
    (ANTIBODY, ("antiberty", "antiberta", "ablang", "igbert", "igt5", "sapiens", "balm", "abbert"), (),
     "antibody heavy/light chains (variable domains, Observed Antibody Space)"),
    ("protein", ("esm2_", "esm2-", "esm-2"), ("esm",), "proteins: UniRef50 clusters, sampled over UniRef90 "
                                                      "(ESM-2, Lin et al. 2023)"),
    ("protein", ("esm1b",), ("esm",), "proteins: UniRef50 (ESM-1b, Rives et al. 2021)"),
    ("protein", ("esm1v",), ("esm",), "proteins: UniRef90 (ESM-1v, Meier et al. 2021)"),
    ("protein", ("esmc", "esm_c", "esm-c"), (), "proteins: UniRef, MGnify and JGI metagenomes (ESM C, "
                                                "EvolutionaryScale 2024)"),
    ("protein", ("prot_bert_bfd", "protbert_bfd", "protbert-bfd"), (), "proteins: BFD (ProtBert-BFD, "
                                                                        "Elnaggar et al. 2021)"),
    ("protein", ("prot_bert", "protbert"), (), "proteins: UniRef100 (ProtBert, Elnaggar et al. 2021)"),
    ("protein", ("prot_t5_xl_uniref50",), (), "proteins: BFD, then UniRef50 (ProtT5-XL-U50, Elnaggar et al. "
                                              "2021)"),
)


def training_domain(model_type: str, name: str) -> tuple[str, str]:
    """(kind, text) of a checkpoint's training domain from its name and model_type (:data:`DOMAINS`), or
    ("unknown", "unknown") when no pattern matches: never guessed from the architecture alone.

    >>> training_domain("esm", "facebook/esm2_t6_8M_UR50D")[0]
    'protein'
    >>> training_domain("bert", "Exscientia/IgBert")[0], training_domain("esm", "./my-finetune")[0]
    ('antibody', 'unknown')
    """
    lowered = str(name or "").lower()
    for kind, fragments, types, text in DOMAINS:
        if any(fragment in lowered for fragment in fragments) and (not types or model_type in types):
            return kind, text
    return UNKNOWN_DOMAIN, UNKNOWN_DOMAIN


@dataclass(frozen=True)
class ArchitectureCard:
    """What one model's attention is, from its config."""

    model_type: str
    attention: str  # MHA | GQA | MQA | MLA
    layers: int
    hidden_size: int
    query_heads: int
    kv_heads: int  # key/value heads (MLA: the per-head keys and values up-projected from the latent)
    head_dim: int  # query/key dimension per head (MLA: qk_nope_head_dim + qk_rope_head_dim)
    value_head_dim: int
    positional: str  # e.g. "learned absolute (1024 positions)", "rotary (θ = 10000)", "ALiBi"
    max_positions: int | None
    sliding_window: int | None  # tokens a sliding-window layer attends to (None: full attention everywhere)
    sliding_layers: int  # how many layers use the window
    attention_parameters: int  # Q, K, V, O projections (weights + biases) of all layers
    kv_lora_rank: int | None = None  # MLA latent of keys and values
    q_lora_rank: int | None = None  # MLA latent of queries (None: a full-rank query projection)
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    domain: str = UNKNOWN_DOMAIN  # what the checkpoint was trained on (training_domain), "unknown" otherwise

    @property
    def kv_values_per_token(self) -> int:
        """Values cached per token over all layers (before any sliding window applies)."""
        return self.layers * self._per_layer_values()

    def _per_layer_values(self) -> int:
        if self.attention == "MLA":
            return int(self.kv_lora_rank or 0) + int(self.qk_rope_head_dim or 0)
        return self.kv_heads * (self.head_dim + self.value_head_dim)

    def kv_cache_bytes(self, dtype: str, tokens: int = 1) -> int:
        """Bytes of the KV cache for one sequence of `tokens` tokens in `dtype` (fp16, bf16 or fp8)."""
        if dtype not in BYTES_PER_VALUE:
            raise ProbeError(f"unknown cache dtype {dtype!r}: use one of {', '.join(BYTES_PER_VALUE)}")
        full_layers = self.layers - self.sliding_layers
        window = min(tokens, self.sliding_window) if self.sliding_window else tokens
        held = full_layers * tokens + self.sliding_layers * window  # token-layers held in the cache
        return held * self._per_layer_values() * BYTES_PER_VALUE[dtype]

    def kv_cache_table(self) -> dict[str, dict[str, int]]:
        """{dtype: {"per token": bytes, "4K": bytes, "32K": bytes, "128K": bytes}}."""
        return {dtype: {"per token": self.kv_cache_bytes(dtype, 1),
                        **{name: self.kv_cache_bytes(dtype, tokens) for name, tokens in CONTEXTS.items()}}
                for dtype in BYTES_PER_VALUE}

    def to_dict(self) -> dict:
        data = asdict(self)
        data["notes"] = list(self.notes)
        data["kv_values_per_token"] = self.kv_values_per_token
        data["kv_cache_bytes"] = self.kv_cache_table()
        return data

    def rows(self) -> list[tuple[str, str]]:
        """(field, value) rows of the one table `probe card` prints and the dashboard shows."""
        heads = f"{self.query_heads} query · {self.kv_heads} key/value"
        if self.attention == "GQA":
            heads += f" ({self.query_heads // max(self.kv_heads, 1)} query heads per kv head)"
        rows = [("model type", self.model_type), ("attention", ATTENTION_NAMES[self.attention]),
                ("layers", str(self.layers)), ("hidden size", str(self.hidden_size)), ("heads", heads),
                ("head dim", str(self.head_dim) if self.head_dim == self.value_head_dim
                 else f"{self.head_dim} query/key · {self.value_head_dim} value")]
        if self.attention == "MLA":
            rows += [("kv latent (kv_lora_rank)", str(self.kv_lora_rank)),
                     ("q latent (q_lora_rank)", "none (full-rank queries)" if self.q_lora_rank is None
                      else str(self.q_lora_rank)),
                     ("rope / nope key dims", f"{self.qk_rope_head_dim} / {self.qk_nope_head_dim}")]
        rows += [("positions", self.positional),
                 ("sliding window", "none" if not self.sliding_window
                  else f"{self.sliding_window} tokens on {self.sliding_layers} of {self.layers} layers"),
                 ("parameters in attention", f"{self.attention_parameters:,}"),
                 ("KV cache values per token", f"{self.kv_values_per_token:,}" + (
                     " (latent + rope key per layer)" if self.attention == "MLA" else ""))]
        for dtype, sizes in self.kv_cache_table().items():
            rows.append((f"KV cache {dtype}", " · ".join(f"{name}: {format_bytes(value)}"
                                                         for name, value in sizes.items())))
        rows.append(("training domain", self.domain))
        rows += [("note", note) for note in self.notes]
        return rows


ATTENTION_NAMES = {"MHA": "MHA (multi-head)", "GQA": "GQA (grouped-query)", "MQA": "MQA (multi-query)",
                   "MLA": "MLA (multi-head latent)"}


def format_bytes(value: int) -> str:
    """1536 -> '1.5 KiB'; binary units."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1024
    return f"{value} B"  # pragma: no cover


def _get(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def whole_number(config, *names, default=None, allow_zero: bool = False) -> int | None:
    """The first of `names` the config sets, as a whole number; one-line ProbeError for NaN, infinities,
    fractions, text or a negative (or zero) count, naming the field."""
    value = _get(config, *names, default=default)
    if value is None:
        return None
    number = value
    if isinstance(value, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
        number = None
    elif isinstance(value, float):
        number = int(value) if math.isfinite(value) and value.is_integer() else None
    if number is None or number < 0 or (number == 0 and not allow_zero):
        name = next((n for n in names if getattr(config, n, None) is not None), names[0])
        raise ProbeError(f"the config's {name} is {value!r}: it must be a positive whole number; fix "
                         "config.json")
    return int(number)


def _positional(config, model_type: str, max_positions: int | None) -> str:
    kind = getattr(config, "position_embedding_type", None)
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    theta = _get(config, "rope_theta") or (rope.get("rope_theta") if isinstance(rope, dict) else None)
    if model_type in ALIBI or getattr(config, "alibi", False):
        return "ALiBi (linear biases, no position embeddings)"
    if kind == "rotary" or theta is not None:
        text = "rotary (RoPE" + (f", θ = {theta:g}" if theta is not None else "") + ")"
        rope_type = rope.get("rope_type") if isinstance(rope, dict) else None
        if rope_type and rope_type != "default":
            text += f", {rope_type} scaling"
        return text
    if kind in ("relative_key", "relative_key_query"):
        return f"relative ({kind})"
    if max_positions:
        return f"learned absolute ({max_positions} positions)"
    return "unknown"


def _sliding(config, layers: int) -> tuple[int | None, int]:
    """(window, how many layers use it)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None, 0
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        count = sum(1 for kind in layer_types if "sliding" in str(kind))
        return (int(window), count) if count else (None, 0)
    return int(window), layers


def _projection_parameters(hidden: int, heads: int, kv_heads: int, head_dim: int, value_dim: int,
                           qkv_bias: bool, out_bias: bool) -> int:
    q = hidden * heads * head_dim + (heads * head_dim if qkv_bias else 0)
    k = hidden * kv_heads * head_dim + (kv_heads * head_dim if qkv_bias else 0)
    v = hidden * kv_heads * value_dim + (kv_heads * value_dim if qkv_bias else 0)
    o = heads * value_dim * hidden + (hidden if out_bias else 0)
    return q + k + v + o


def _mla_parameters(config, hidden: int, heads: int, nope: int, rope: int, value_dim: int, kv_rank: int,
                    q_rank: int | None) -> int:
    bias = bool(getattr(config, "attention_bias", False))
    qk = nope + rope
    if q_rank:
        q = hidden * q_rank + (q_rank if bias else 0) + q_rank + q_rank * heads * qk  # q_a, its RMSNorm, q_b
    else:
        q = hidden * heads * qk
    kv_a = hidden * (kv_rank + rope) + ((kv_rank + rope) if bias else 0) + kv_rank  # + the latent's RMSNorm
    kv_b = kv_rank * heads * (nope + value_dim)
    o = heads * value_dim * hidden + (hidden if bias else 0)
    return q + kv_a + kv_b + o


def architecture_card(config, name: str | None = None) -> ArchitectureCard:
    """The card of a transformers config (a PretrainedConfig, or a dict as in config.json); `name` (default:
    the config's ``_name_or_path``) gives the training domain (:func:`training_domain`)."""
    if isinstance(config, dict):
        config = config_from_dict(config)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    model_type = str(getattr(config, "model_type", "") or "unknown")
    domain = training_domain(model_type, name or str(getattr(config, "_name_or_path", "") or ""))[1]
    layers = whole_number(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = whole_number(config, "num_attention_heads", "n_head")
    hidden = whole_number(config, "hidden_size", "n_embd", "d_model")
    if not (layers and heads and hidden):
        raise ProbeError(f"the {model_type} config names no layer count, head count or hidden size; "
                         "it is not a transformer this card can read")
    max_positions = whole_number(config, "max_position_embeddings", "n_positions")
    window, sliding_layers = _sliding(config, layers)
    notes: list[str] = []
    # probe.layers imports torch: imported here so that `probe card --help` and a config-only card stay light
    # (tests/commands/test_cli_fast.py)
    from probe.layers import config_attention_layers

    hybrid = config_attention_layers(config)
    if hybrid is not None:  # only these layers have heads with α; the capture lists only them
        with_alpha, others = hybrid
        notes.append(f"hybrid: softmax attention (heads with α) in {len(with_alpha)} of {layers} layers "
                     f"({', '.join(map(str, with_alpha))}); the others "
                     f"({', '.join(sorted({k for _, k in others}))}) have no attention weights")
    kv_rank = getattr(config, "kv_lora_rank", None)
    if kv_rank:
        nope, rope = int(config.qk_nope_head_dim), int(config.qk_rope_head_dim)
        value_dim = int(_get(config, "v_head_dim", default=nope))
        q_rank = getattr(config, "q_lora_rank", None)
        q_rank = int(q_rank) if q_rank else None
        params = layers * _mla_parameters(config, hidden, heads, nope, rope, value_dim, int(kv_rank), q_rank)
        notes.append("MLA caches the compressed latent and one shared rotary key per token and layer, "
                     "not per-head keys and values")
        return ArchitectureCard(model_type, "MLA", layers, hidden, heads, heads, nope + rope, value_dim,
                                _positional(config, model_type, max_positions), max_positions, window,
                                sliding_layers, params, int(kv_rank), q_rank, rope, nope, tuple(notes),
                                domain)
    kv_heads = whole_number(config, "num_key_value_heads", "num_kv_heads", default=heads)
    if getattr(config, "multi_query", False):
        kv_heads = 1
    if heads % kv_heads:
        raise ProbeError(f"{heads} query heads cannot be grouped over {kv_heads} key/value heads")
    head_dim = whole_number(config, "head_dim", default=hidden // heads) or hidden // heads
    value_dim = whole_number(config, "v_head_dim", default=head_dim)
    attention = "MHA" if kv_heads == heads else ("MQA" if kv_heads == 1 else "GQA")
    biased = model_type in BIASED
    qkv_bias = (biased or bool(getattr(config, "attention_bias", False))
                or model_type in ("qwen2", "qwen2_moe"))
    out_bias = biased or bool(getattr(config, "attention_bias", False))
    params = layers * _projection_parameters(hidden, heads, kv_heads, head_dim, value_dim, qkv_bias, out_bias)
    return ArchitectureCard(model_type, attention, layers, hidden, heads, kv_heads, head_dim, value_dim,
                            _positional(config, model_type, max_positions), max_positions, window,
                            sliding_layers, params, notes=tuple(notes), domain=domain)


def config_from_dict(data: dict):
    import transformers  # imported here, like probe.layers above: `probe card --help` stays light

    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not model_type:
        raise ProbeError("the config has no model_type; pass a config.json written by save_pretrained")
    try:
        config_class = transformers.AutoConfig.for_model(model_type).__class__
    except ValueError:
        raise ProbeError(f"unknown model_type {model_type!r} in the config") from None
    fields = {key: value for key, value in data.items() if key != "model_type"}
    try:
        return config_class(**fields)
    except Exception as error:  # noqa: BLE001 - transformers' validators raise their own types on a bad config
        reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())[:300]
        raise ProbeError(f"the {model_type} config is not valid: {reason or type(error).__name__}") from None


def load_config(spec: str):
    """The config of a model spec (hub id from the cache, local directory, zoo:NAME) or of a config.json
    file."""
    # imported here, like probe.layers above (both import torch): `probe card --help` stays light
    import transformers

    from probe.specs import resolve

    source = resolve(spec)
    path = Path(source).expanduser()
    if path.is_file():
        try:
            return config_from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ProbeError(f"cannot read {path} as a JSON config: {error}") from None
    if path.is_dir() and not (path / "config.json").exists():
        raise ProbeError(f"{path} holds no config.json; pass a model directory or a config.json file")
    if not path.exists() and spec.startswith((".", "/", "~")):
        raise ProbeError(f"{spec} does not exist; pass a model directory, a config.json or a hub id")
    try:
        return transformers.AutoConfig.from_pretrained(str(path) if path.exists() else source)
    except Exception as error:  # noqa: BLE001 - OSError, ValueError, and transformers' strict field validators
        reason = " ".join(line.strip() for line in str(error).splitlines() if line.strip())[:300]
        raise ProbeError(f"cannot read the config of {spec!r}: {reason or type(error).__name__}") from None

