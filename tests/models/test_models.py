"""Loading: local directories, zoo specs, kinds, and one-line errors naming the fix."""

from __future__ import annotations

import pytest
import torch

from probe import models
from probe.errors import ProbeError


@pytest.mark.parametrize(("arch", "kind"), [("gpt2", "causal_lm"), ("bert", "masked_lm"),
                                            ("esm", "protein_mlm"), ("llama", "causal_lm"),
                                            ("protbert", "protein_mlm"), ("prott5", "protein_mlm")])
def test_load_local_directory(tiny_dir, arch, kind):
    loaded = models.load(str(tiny_dir(arch)))
    assert loaded.kind == kind
    assert isinstance(loaded.kind, models.ModelKind) and loaded.kind is models.ModelKind(kind)
    assert f"{loaded.kind}" == kind and str(loaded.kind) == kind
    assert not loaded.model.training
    assert loaded.model.config._attn_implementation == "sdpa"
    assert loaded.n_layers == 2 and loaded.n_heads == 4
    assert loaded.revision.startswith("sha256:")


@pytest.mark.parametrize(("arch", "style", "contact_head", "tokens"), [
    ("esm", "letters", True, ["<cls>", *"MKTAYIAK", "<eos>"]),
    ("protbert", "spaced", False, ["[CLS]", *"MKTAYIAK", "[SEP]"]),
    ("prott5", "spaced", False, [f"▁{letter}" for letter in "MKTAYIAK"] + ["</s>"]),
])
def test_protein_conventions(tiny_dir, arch, style, contact_head, tokens):
    loaded = models.load(str(tiny_dir(arch)))
    assert loaded.residue_format == style and loaded.has_contact_head is contact_head
    ids = models.tokenize_protein(loaded, "mkta yiak")["input_ids"][0].tolist()
    assert loaded.tokenizer.convert_ids_to_tokens(ids) == tokens
    assert loaded.residue_offset == (0 if arch == "prott5" else 1)
    assert models.model_card(loaded)["kind"] == "protein_mlm"


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_text_models_have_no_residue_format(tiny_dir, arch):
    loaded = models.load(str(tiny_dir(arch)))
    assert loaded.residue_format is None and not loaded.has_contact_head
    assert models.residue_format(loaded.tokenizer) is None


def test_a_character_vocabulary_of_capitals_and_digits_is_not_protein():
    from probe.zoo.tiny import word_tokenizer

    tokenizer = word_tokenizer([*"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"0123456789"])
    assert models.residue_format(tokenizer) is None
    assert models.residue_format(word_tokenizer(list("ACDEFGHIKLMNPQRSTVWYXBUZO"))) == "spaced"


def test_spaced_letters_are_refused_where_the_vocabulary_lacks_them(tiny_dir):
    loaded = models.load(str(tiny_dir("prott5")))
    with pytest.raises(ProbeError, match=r"'J' at 2"):
        models.tokenize_protein(loaded, "MJK")


def test_require_protein_names_the_kind(tiny_dir):
    with pytest.raises(ProbeError, match="is a masked_lm model: contacts needs a protein language model"):
        models.require_protein(models.load(str(tiny_dir("bert"))), "contacts")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_weights_are_one_line_errors(tiny_dir, tmp_path, damage):
    import shutil

    directory = tmp_path / "model"
    shutil.copytree(tiny_dir("protbert"), directory)
    weights = directory / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"not a safetensors file" * 4,
                         "empty": b""}[damage])
    with pytest.raises(ProbeError, match="cannot load the weights") as info:
        models.load(str(directory))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("device", "message"), [("meta", "meta holds no weights"),
                                                 ("mps", "no Apple GPU"), ("xla", "not supported"),
                                                 ("cuda:7", "cuda")])
def test_devices_this_machine_lacks(tiny_dir, device, message):
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has an Apple GPU")
    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 CUDA devices")
    with pytest.raises(ProbeError, match=message) as info:
        models.load(str(tiny_dir("gpt2")), device=device)
    assert "\n" not in str(info.value)


def test_revision_is_a_content_hash(tiny_dir):
    first = models.load(str(tiny_dir("gpt2", seed=0))).revision
    assert models.load(str(tiny_dir("gpt2", seed=0))).revision == first
    assert models.load(str(tiny_dir("gpt2", seed=1))).revision != first


def test_dtype_option(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")), dtype="bfloat16")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16


def test_esm_length_limit_is_1024_tokens(tiny_dir):
    loaded = models.load(str(tiny_dir("esm")))
    assert loaded.max_tokens == 1024
    with pytest.raises(ProbeError, match="at most 1024"):
        models.tokenize_protein(loaded, "A" * 1023)
    assert models.tokenize_protein(loaded, "a" * 1022)["input_ids"].shape[1] == 1024


def test_protein_letters_rejected_with_positions():
    with pytest.raises(ProbeError, match=r"'J' at 3, '1' at 5"):
        models.clean_protein("MKJA1")
    assert models.clean_protein("mk ta\nY") == "MKTAY"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("./no/such/dir", "does not exist"),
        ("/definitely/missing/model", "does not exist"),
        ("gpt2", "hub is not reachable"),
        ("some-org/some-model", "hub is not reachable"),
    ],
)
def test_load_errors_are_one_line(spec, message):
    with pytest.raises(ProbeError, match=message) as info:
        models.load(spec)
    assert "\n" not in str(info.value)


def test_directory_without_config(tmp_path):
    with pytest.raises(ProbeError, match="no config.json"):
        models.load(str(tmp_path))


def test_unknown_device(tiny_dir):
    with pytest.raises(ProbeError, match="unknown device"):
        models.load(str(tiny_dir("gpt2")), device="tpu9")


def test_text_too_long(tiny_dir):
    loaded = models.load(str(tiny_dir("gpt2")))
    with pytest.raises(ProbeError, match="at most 128"):
        models.tokenize_text(loaded, "the " * 200)


def test_an_empty_text_names_no_cli_flag(tiny_dir):
    """Issue 44: a library error speaks to a Python caller (no "--text"); probe capture says the flag."""
    loaded = models.load(str(tiny_dir("gpt2")))
    with pytest.raises(ProbeError, match="the text is empty") as raised:
        models.tokenize_text(loaded, "")
    assert "--" not in str(raised.value)
