"""What `probe history` checks before it measures anything (one line naming the fix, never a half-run):

* every checkpoint is a folder of the run (``--revisions ../../other/step-0`` is refused) that exists;
* every checkpoint is of the run's model: the essentials of its config.json (:data:`CONFIG_ESSENTIALS`: model
  type, architectures, sizes, vocabulary, positions) and its tokenizer's vocabulary
  (:func:`tokenizer_fingerprint`) equal the reference's — the run folder's own config.json where it has one,
  else its first checkpoint (in step order);
* the ICL positions fit the model's positions (:func:`probe.models.config_max_tokens`, the limit loading
  would find), and some held-out passage is that long;
* the tokenizer reads the held-out text: at most :data:`MAX_UNKNOWN_SHARE` of its tokens may be the unknown
  token (a loss and an ICL score measured on ``<unk>`` after ``<unk>`` would be drawn as learning).

And which text it measures on (:func:`held_out_text`, issue 54): the split held out from the text the model's
card names (card.json ``config.corpus_split``, :func:`probe.training.text.held_out_split`), so a model trained
on Python source is measured on held-out Python source, not on English.

Local checkpoints only: a hub revision's files are not at hand before loading (its unit then refuses what it
can, :func:`probe.runs.history.measure`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from probe.errors import ProbeError
from probe.heads.corpus import TEXTS
from probe.runs.checkpoints import Checkpoint, checkpoint_directory, local_directory

# config.json keys that make two checkpoints the same model when equal (those present in either are compared;
# a checkpoint of the run differs from another only in its weights)
CONFIG_ESSENTIALS = (
    "model_type", "architectures", "is_encoder_decoder", "vocab_size",
    "n_embd", "hidden_size", "d_model", "n_layer", "num_hidden_layers", "num_layers", "n_head",
    "num_attention_heads", "num_heads", "num_key_value_heads", "head_dim", "d_kv", "n_inner",
    "intermediate_size", "d_ff", "n_positions", "max_position_embeddings", "rotary_dim", "sliding_window",
)
# the files a tokenizer's vocabulary is read from (tokenizer.json: its "model" and "added_tokens" only, so a
# re-save with other padding or truncation settings is the same tokenizer)
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")
# the largest share of the held-out text's tokens that may be the tokenizer's unknown token; above it the
# held-out loss and the ICL score measure predicting <unk>, not the text (zoo:induction reads GAP as 99.9 %
# <unk>; a tokenizer learnt on English reads it with none)
MAX_UNKNOWN_SHARE = 0.5
# the texts a history can measure on: GAP's two shipped splits and the Python standard library's two (their
# one home, probe.heads.corpus.TEXTS)
TEXT_SPLITS = TEXTS
# the training splits whose held-out split is known (probe.training.text.TRAIN_SPLIT and CODE_SPLIT); a card
# naming another (e.g. a run trained on the held-out split itself) is refused, never measured on a guess
TRAINED_SPLITS = ("validation", "stdlib")


def config_essentials(directory: Path) -> dict:
    """The :data:`CONFIG_ESSENTIALS` of a model folder's config.json (a one-line ProbeError when it cannot be
    read)."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ProbeError(f"cannot read {directory / 'config.json'}: {error}") from None
    if not isinstance(config, dict):
        raise ProbeError(f"{directory / 'config.json'} is not a model config (a JSON object)")
    return {key: config[key] for key in CONFIG_ESSENTIALS if key in config}


def tokenizer_fingerprint(directory: Path) -> str | None:
    """sha256 of a model folder's tokenizer vocabulary (:data:`TOKENIZER_FILES`); None when it has none of
    them (unknown: not compared)."""
    digest, found = hashlib.sha256(), False
    for name in TOKENIZER_FILES:
        path = directory / name
        if not path.is_file():
            continue
        found = True
        digest.update(name.encode() + b"\0")
        data = path.read_bytes()
        if name == "tokenizer.json":
            try:
                parsed = json.loads(data)
                data = json.dumps([parsed.get("model"), parsed.get("added_tokens")], sort_keys=True).encode()
            except (ValueError, AttributeError):
                pass  # not JSON: its bytes
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest() if found else None


def card_corpus(directory: Path) -> tuple[str | None, str | None]:
    """What a model folder's card.json says of its training text: ``(config.corpus_split, name)`` — the split
    (None when the card has no ``config`` with one, or its ``config.data`` says the model read generated
    data, not a text) and the recipe's ``name`` (None when none); ``(None, None)`` when the folder has no
    card.json.

    Raises
    ------
    ProbeError
        card.json cannot be read or is not a JSON object (one line naming the fix: ``--text``).

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from probe.runs.history_inputs import card_corpus
    >>> folder = Path(tempfile.mkdtemp())
    >>> card_corpus(folder)
    (None, None)
    >>> _ = (folder / "card.json").write_text(json.dumps({"name": "stdlib-code",
    ...                                                   "config": {"corpus_split": "stdlib"}}))
    >>> card_corpus(folder)
    ('stdlib', 'stdlib-code')
    """
    path = directory / "card.json"
    if not path.is_file():
        return None, None
    fix = "repair or remove it, or pass --text SPLIT (HistoryConfig(split=...)), the text to measure on"
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ProbeError(f"cannot read {path} ({error}), which names the model's training text: {fix}") \
            from None
    if not isinstance(card, dict):
        raise ProbeError(f"{path} is not a model card (a JSON object), which names the training text: {fix}")
    config = card.get("config")
    config = config if isinstance(config, dict) else {}
    split = config.get("corpus_split") if config.get("data", "natural_text") == "natural_text" else None
    if split is not None and not isinstance(split, str):
        raise ProbeError(f"{path} names the training text {split!r}, not a split name: {fix}")
    name = card.get("name")
    return split, name if isinstance(name, str) else None


def recipe_text(name: str, where: object) -> None:
    """A checkpoint's card that names recipe `name` but no config (what ``probe train`` wrote before step
    cards recorded their text, or another trainer): nothing to read when the recipe reads no text (or is
    unknown); a one-line ProbeError naming `where` and ``--text`` when it does — which text a ``--set
    corpus_split`` chose is not on the card, and a guess would measure the wrong text."""
    from probe.training.organisms import ORGANISMS

    if name in ORGANISMS and ORGANISMS[name].data == "natural_text":
        raise ProbeError(f"{where} names the recipe {name}, which trains on a text, but not which one: pass "
                         "--text SPLIT, the text to measure on")


def held_out_text(model: str, checkpoints: Sequence[Checkpoint]) -> tuple[str, str]:
    """The text a history of `model` is measured on, and where that came from: the split held out from the
    training text (:func:`probe.training.text.held_out_split`) that the card names — the run folder's
    card.json (``config.corpus_split``, what ``probe train`` writes at the end of a run), else the first
    checkpoint's — and GAP's development split where no card names a text (a hub model, another trainer's
    checkpoints, a model trained on generated data).

    A run still training has only its checkpoints' cards: ``probe train`` writes the training text on
    them (``config.corpus_split``); an older card that names a recipe reading text but not the text is
    refused (:func:`recipe_text`).

    Parameters
    ----------
    model
        The run: a local directory (or zoo:NAME) or a hub id.
    checkpoints
        Its checkpoints in step order (the first one's card is read when the run folder has none).

    Returns
    -------
    tuple of str
        The split (one of :data:`TEXT_SPLITS`) and a phrase saying why, e.g. ``"from run/card.json: trained
        on stdlib"``.

    Raises
    ------
    ProbeError
        The card cannot be read, names a training text whose held-out text is unknown, or (a run still
        training) an older checkpoint card names a recipe that reads text but not the text (one line: pass
        ``--text``).

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from probe.runs.history_inputs import held_out_text
    >>> run = Path(tempfile.mkdtemp())
    >>> held_out_text(str(run), [])[0]  # no card: GAP's development split
    'development'
    >>> _ = (run / "card.json").write_text(json.dumps({"config": {"corpus_split": "stdlib"}}))
    >>> held_out_text(str(run), [])[0]
    'stdlib-held-out'
    """
    from probe.training import text

    base = local_directory(model)
    folders = [] if base is None else [base]
    first = checkpoint_directory(checkpoints[0]) if checkpoints else None
    if first is not None and (base is None or first.resolve() != base.resolve()):
        folders.append(first)
    for folder in folders:
        if not (folder / "card.json").is_file():
            continue
        split, name = card_corpus(folder)
        card = folder / "card.json"
        where = card.relative_to(base.parent) if base is not None and base in card.parents else card
        if split is None and folder is not base and name is not None:
            recipe_text(name, where)  # an older checkpoint card: the recipe, not its text
        if split is None:
            break  # the card names no text: GAP's
        if split not in TRAINED_SPLITS:
            raise ProbeError(f"{card} says the model was trained on {split!r}, whose "
                             f"held-out text probe history does not know: pass --text SPLIT (one of "
                             f"{', '.join(TEXT_SPLITS)}), the text to measure on")
        return text.held_out_split(split), f"from {where}: trained on {split}"
    return text.HELD_OUT_SPLIT, "no card names the model's training text: GAP's"


def check_revisions_inside(model: str, revisions: Sequence[str]) -> None:
    """For a local run folder: each revision names a checkpoint folder inside it (with a config.json)."""
    base = local_directory(model)
    if base is None:
        return
    root = base.resolve()
    for revision in revisions:
        target = (base / revision).resolve()
        if target != root and root not in target.parents:
            raise ProbeError(f"--revisions {revision} is outside {model}: a history measures the checkpoints "
                             "of one run; give folders inside it (step-0,step-500)")
        if not (target / "config.json").is_file():
            raise ProbeError(f"--revisions {revision}: {model} has no checkpoint folder {revision} (with a "
                             "config.json); list its step-N folders")


def check_one_model(model: str, checkpoints: Sequence[Checkpoint]) -> Path | None:
    """Every local checkpoint is of the reference model (the run folder's config.json, else the first
    checkpoint): the same config essentials and tokenizer vocabulary, or one line naming the odd one. Returns
    the reference folder (None when no checkpoint is local)."""
    base = local_directory(model)
    folders = [(c.name, checkpoint_directory(c)) for c in checkpoints]
    folders = [(name, folder) for name, folder in folders if folder is not None]
    if base is not None and (base / "config.json").is_file():
        reference = (Path(model).name or model, base)
    elif folders:
        reference = folders[0]
    else:
        return None
    ref_name, ref_folder = reference
    essentials, vocabulary = config_essentials(ref_folder), tokenizer_fingerprint(ref_folder)
    for name, folder in folders:
        if folder.resolve() == ref_folder.resolve():
            continue
        theirs = config_essentials(folder)
        differ = [key for key in CONFIG_ESSENTIALS if essentials.get(key) != theirs.get(key)]
        if differ:
            key = differ[0]
            raise ProbeError(f"checkpoint {name} is of another model than {ref_name}: its config's {key} is "
                             f"{theirs.get(key)!r}, not {essentials.get(key)!r}; a history measures one "
                             f"model's checkpoints: move {name} out of {model} or leave it out of "
                             "--revisions")
        other = tokenizer_fingerprint(folder)
        if vocabulary is not None and other is not None and other != vocabulary:
            raise ProbeError(f"checkpoint {name} has another tokenizer than {ref_name} (its vocabulary "
                             f"differs); a history measures one model's checkpoints: move {name} out of "
                             f"{model} or leave it out of --revisions")
    return ref_folder


def check_text_fits(folder: Path, early: int, late: int, split: str, limit: int | None) -> None:
    """The ICL positions fit the model's positions, some held-out passage has `late` tokens, and at most
    :data:`MAX_UNKNOWN_SHARE` of the held-out tokens are unknown to the tokenizer (config and tokenizer only:
    no weights are read)."""
    import transformers

    from probe.models import config_max_tokens
    from probe.quiet import transformers_quiet
    from probe.training import text

    try:
        with transformers_quiet():
            config = transformers.AutoConfig.from_pretrained(str(folder))
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    except Exception:  # noqa: BLE001 - unreadable here: loading the checkpoint says why, unit by unit
        return
    limit_tokens = config_max_tokens(config)
    if limit_tokens < late + 1:
        raise ProbeError(f"--icl-positions {early},{late}: the model reads {limit_tokens} positions, too few "
                         f"for the ICL score at token {late} (after <bos>); give LATE of at most "
                         f"{limit_tokens - 1}")
    if tokenizer.bos_token_id is None:
        raise ProbeError(f"{folder}'s tokenizer has no BOS token: the held-out passages start with one")
    rows = text.held_out_rows(tokenizer, late, split, limit)  # [row position]
    if not len(rows):
        raise ProbeError(f"no passage of the {split} text has {late} tokens with this model's tokenizer; "
                         "lower --icl-positions")
    unknown = tokenizer.unk_token_id
    share = float((rows[:, 1:] == unknown).float().mean()) if unknown is not None else 0.0
    if share > MAX_UNKNOWN_SHARE:
        raise ProbeError(f"the tokenizer reads {share:.1%} of the held-out text as its unknown token "
                         f"{tokenizer.unk_token!r} (more than {MAX_UNKNOWN_SHARE:.0%}): its held-out loss "
                         f"and ICL score would measure predicting <unk>, not the {split} text; a history "
                         "needs a model whose tokenizer reads that text (e.g. `probe train natural-text` for "
                         "GAP's English), or another --text")


__all__ = ["CONFIG_ESSENTIALS", "MAX_UNKNOWN_SHARE", "TEXT_SPLITS", "TOKENIZER_FILES", "TRAINED_SPLITS",
           "card_corpus", "check_one_model", "check_revisions_inside", "check_text_fits", "config_essentials",
           "held_out_text", "recipe_text", "tokenizer_fingerprint"]
