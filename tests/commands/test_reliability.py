"""The reliability suite: every bad input of every subcommand is exit code 2 with one stderr line and no
partial output; `probe label` and `probe contacts` killed with SIGKILL at random moments resume to the same
result.

The bad-input table runs the CLI in-process (`probe.cli.main`), which is fast; a few cases also run as a real
process, where Python warnings and argparse's own exit path would show. `probe app` never serves here: Dash's
`run` is replaced by one that fails the test, so a case that wrongly passes every check cannot hang the suite.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probe.cli import main
from tests.conftest import compact_synthetic_pdb
from tests.tiny_archs import save as save_tiny_arch

REPO = Path(__file__).resolve().parents[2]
PROTEIN = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"


@dataclass(frozen=True)
class Case:
    """One bad input: argv with {placeholders} (see `assets`)."""

    name: str
    argv: tuple[str, ...]


def case(name: str, *argv: str) -> Case:
    return Case(name, argv)


CAPTURE = ("capture", "--model", "{gpt2}", "--text", "the cat sat on the mat")
CAPTURE_OUT = (*CAPTURE, "--out", "{tmp}/a.npz")
ESM_CAPTURE = ("capture", "--model", "{esm}", "--sequence", PROTEIN, "--out", "{tmp}/a.npz")
LABEL = ("label", "--model", "{gpt2}", "--examples", "4", "--bootstrap", "20", "--ablate", "none")
LABEL_OUT = (*LABEL, "--out", "{tmp}/r.csv")
CONTACTS = ("contacts", "--model", "{esm}", "--sequence", PROTEIN)
CONTACTS_OUT = (*CONTACTS, "--out", "{tmp}/c.npz")
APP = ("app", "--port", "{free_port}")
PROFILE_OUT = ("profile", "--model", "{gpt2}", "--random", "2", "--seq-len", "16", "--out", "{tmp}/p.csv")
REPORT = ("report", "--model", "{gpt2}", "--out", "{tmp}/r.html")
ESM_REPORT = ("report", "--model", "{esm}", "--out", "{tmp}/r.html")
HISTORY = ("history", "--model", "{checkpoints}")
CIRCUIT = ("circuit", "--model", "{gpt2}", "--type", "induction")

CASES = [
    # --- argparse: one line, never the usage block ----------------------------------------------------------
    case("no-command"),
    case("unknown-command", "bogus"),
    case("capture-no-arguments", "capture"),
    case("capture-no-source", "capture", "--model", "{gpt2}", "--out", "{tmp}/a.npz"),
    case("capture-text-and-sequence", *CAPTURE_OUT, "--sequence", PROTEIN),
    case("capture-bad-dtype", *CAPTURE_OUT, "--dtype", "float64"),
    case("capture-unknown-flag", *CAPTURE_OUT, "--bogus"),
    case("label-no-arguments", "label"),
    case("label-examples-not-int", *LABEL, "--examples", "abc"),
    case("label-bad-coref-set", *LABEL, "--coref-set", "nope"),
    case("label-bad-ablate", *LABEL, "--ablate", "nope"),
    case("label-batch-size-float", *LABEL, "--batch-size", "1.5"),
    case("label-bootstrap-not-int", *LABEL, "--bootstrap", "x"),
    case("label-fdr-not-number", *LABEL, "--fdr", "x"),
    case("contacts-sequence-and-fasta", *CONTACTS, "--fasta", "{fasta}"),
    case("contacts-bad-cb", *CONTACTS, "--cb", "nope"),
    case("contacts-threshold-not-number", *CONTACTS, "--threshold", "abc"),
    case("contacts-window-float", *CONTACTS, "--window", "1.5"),
    case("contacts-min-count-not-int", *CONTACTS, "--min-count", "x"),
    case("app-port-not-int", "app", "--port", "abc"),
    case("app-max-tokens-float", *APP, "--max-tokens", "1.5"),
    case("app-upload-not-number", *APP, "--upload-mb", "x"),
    case("app-unknown-flag", *APP, "--bogus"),
    # --- output paths: checked before any computing ---------------------------------------------------------
    case("capture-out-bad-extension", *CAPTURE, "--out", "{tmp}/a.txt"),
    case("capture-out-is-folder", *CAPTURE, "--out", "{tmp}/folder.npz"),
    case("capture-out-missing-folder", *CAPTURE, "--out", "{tmp}/missing/a.npz"),
    case("capture-out-folder-is-a-file", *CAPTURE, "--out", "{tmp}/plain.txt/a.npz"),
    case("capture-out-read-only", *CAPTURE, "--out", "{readonly}/a.npz"),
    case("capture-out-not-a-zip", *CAPTURE, "--out", "{tmp}/notzip.npz"),
    case("label-out-bad-extension", *LABEL, "--out", "{tmp}/r.xlsx"),
    case("label-out-is-folder", *LABEL, "--out", "{tmp}/folder.csv"),
    case("label-out-missing-folder", *LABEL, "--out", "{tmp}/missing/r.csv"),
    case("label-out-read-only", *LABEL, "--out", "{readonly}/r.csv"),
    case("label-out-foreign-csv", *LABEL, "--out", "{tmp}/foreign.csv"),
    case("label-out-foreign-parquet", *LABEL, "--out", "{tmp}/foreign.parquet"),
    case("label-out-foreign-json", *LABEL, "--out", "{tmp}/foreign.json"),
    case("contacts-out-bad-extension", *CONTACTS, "--out", "{tmp}/c.txt"),
    case("contacts-out-is-folder", *CONTACTS, "--out", "{tmp}/folder.npz"),
    case("contacts-out-read-only", *CONTACTS, "--out", "{readonly}/c.npz"),
    case("contacts-out-not-a-zip", *CONTACTS, "--out", "{tmp}/notzip.npz"),
    case("contacts-heads-out-bad-extension", *CONTACTS, "--heads-out", "{tmp}/h.tsv"),
    case("contacts-heads-out-read-only", *CONTACTS, "--heads-out", "{readonly}/h.parquet"),
    case("contacts-heads-out-missing-folder", *CONTACTS, "--heads-out", "{tmp}/missing/h.parquet"),
    case("contacts-two-outputs-one-file", *CONTACTS, "--heads-out", "{tmp}/h.parquet",
         "--chains-out", "{tmp}/h.parquet"),
    # --- models and devices ---------------------------------------------------------------------------------
    case("capture-model-missing", "capture", "--model", "{tmp}/no-such-model", "--text", "a", "--out",
         "{tmp}/a.npz"),
    case("capture-model-unknown-organism", "capture", "--model", "zoo:nope", "--text", "a", "--out",
         "{tmp}/a.npz"),
    case("capture-model-corrupt-weights", "capture", "--model", "{corrupt_gpt2}", "--text", "a",
         "--out", "{tmp}/a.npz"),
    case("capture-model-truncated-weights", "capture", "--model", "{truncated_gpt2}", "--text", "a",
         "--out", "{tmp}/a.npz"),
    case("label-model-corrupt-weights", "label", "--model", "{corrupt_gpt2}", "--out", "{tmp}/r.csv"),
    case("contacts-model-corrupt-weights", "contacts", "--model", "{corrupt_esm}", "--sequence", PROTEIN,
         "--out", "{tmp}/c.npz"),
    case("app-model-corrupt-weights", *APP, "--model", "{corrupt_gpt2}"),
    case("capture-device-mps", *CAPTURE_OUT, "--device", "mps"),
    case("capture-device-meta", *CAPTURE_OUT, "--device", "meta"),
    case("capture-device-unknown", *CAPTURE_OUT, "--device", "gpu9"),
    case("label-device-meta", *LABEL_OUT, "--device", "meta"),
    case("contacts-device-mps", *CONTACTS_OUT, "--device", "mps"),
    case("app-device-meta", *APP, "--model", "{gpt2}", "--device", "meta"),
    # --- capture: inputs, layers and heads ------------------------------------------------------------------
    case("capture-sequence-on-text-model", "capture", "--model", "{gpt2}", "--sequence", PROTEIN,
         "--out", "{tmp}/a.npz"),
    case("capture-text-on-protein-model", "capture", "--model", "{esm}", "--text", "hello", "--out",
         "{tmp}/a.npz"),
    case("capture-layers-backwards", *CAPTURE_OUT, "--layers", "1-0"),
    case("capture-heads-huge-range", *CAPTURE_OUT, "--heads", "0-999999999999"),
    case("capture-heads-large-range", *CAPTURE_OUT, "--heads", "0-20000000"),
    case("capture-layers-out-of-range", *CAPTURE_OUT, "--layers", "99"),
    case("capture-heads-negative", *CAPTURE_OUT, "--heads", "-1"),
    case("capture-layers-not-a-number", *CAPTURE_OUT, "--layers", "a"),
    case("capture-layers-open-range", *CAPTURE_OUT, "--layers", "0-"),
    case("capture-heads-empty-item", *CAPTURE_OUT, "--heads", "0,,1"),
    case("capture-empty-text", "capture", "--model", "{gpt2}", "--text", "", "--out", "{tmp}/a.npz"),
    case("capture-text-too-long", "capture", "--model", "{gpt2}", "--text", "the " * 5000, "--out",
         "{tmp}/a.npz"),
    case("capture-sequence-not-protein", "capture", "--model", "{esm}", "--sequence", "12345!", "--out",
         "{tmp}/a.npz"),
    case("capture-sequence-empty", "capture", "--model", "{esm}", "--sequence", "", "--out", "{tmp}/a.npz"),
    # --- label ----------------------------------------------------------------------------------------------
    case("label-examples-zero", *LABEL_OUT, "--examples", "0"),
    case("label-examples-negative", *LABEL_OUT, "--examples", "-5"),
    case("label-seq-len-zero", *LABEL_OUT, "--seq-len", "0"),
    case("label-seq-len-text", *LABEL_OUT, "--seq-len", "abc"),
    case("label-seq-len-too-long", *LABEL_OUT, "--seq-len", "100000"),
    case("label-unknown-type", *LABEL_OUT, "--types", "bogus"),
    case("label-empty-types", *LABEL_OUT, "--types", ","),
    case("label-probe-file-missing", *LABEL_OUT, "--types", "coreference", "--probe-file",
         "{tmp}/none.jsonl"),
    case("label-probe-file-not-utf8", *LABEL_OUT, "--types", "coreference", "--probe-file", "{latin1_jsonl}"),
    case("label-probe-file-bad-json", *LABEL_OUT, "--types", "coreference", "--probe-file", "{bad_jsonl}"),
    case("label-probe-file-without-coreference", *LABEL_OUT, "--types", "induction", "--probe-file",
         "{good_jsonl}"),
    case("label-batch-size-zero", *LABEL_OUT, "--batch-size", "0"),
    case("label-bootstrap-zero", *LABEL_OUT, "--bootstrap", "0"),
    case("label-fdr-above-one", *LABEL_OUT, "--fdr", "1.5"),
    case("label-fdr-nan", *LABEL_OUT, "--fdr", "nan"),
    case("label-min-effect-nan", *LABEL_OUT, "--min-effect", "nan"),
    case("label-second-model-missing", *LABEL_OUT, "--model", "{tmp}/no-such-model"),
    case("label-plot-bad-extension", *LABEL_OUT, "--plot", "{tmp}/sweep.txt"),
    case("label-plot-folder-missing", *LABEL_OUT, "--plot", "{tmp}/no-such-folder/sweep.html"),
    # --- contacts -------------------------------------------------------------------------------------------
    case("contacts-threshold-nan", *CONTACTS_OUT, "--threshold", "nan"),
    case("contacts-threshold-negative", *CONTACTS_OUT, "--threshold", "-1"),
    case("contacts-threshold-zero", *CONTACTS_OUT, "--threshold", "0"),
    case("contacts-binding-distance-inf", *CONTACTS_OUT, "--binding-distance", "inf"),
    case("contacts-min-attention-zero", *CONTACTS_OUT, "--min-attention", "0"),
    case("contacts-min-attention-above-one", *CONTACTS_OUT, "--min-attention", "2"),
    case("contacts-min-count-zero", *CONTACTS_OUT, "--min-count", "0"),
    case("contacts-window-zero", *CONTACTS_OUT, "--window", "0"),
    case("contacts-window-negative", *CONTACTS_OUT, "--window", "-10"),
    case("contacts-window-beyond-the-model", "contacts", "--model", "{esm}", "--sequence", PROTEIN * 10,
         "--window", "5000", "--out", "{tmp}/c.npz"),
    case("contacts-fasta-missing", "contacts", "--model", "{esm}", "--fasta", "{tmp}/none.fa", "--out",
         "{tmp}/c.npz"),
    case("contacts-fasta-not-utf8", "contacts", "--model", "{esm}", "--fasta", "{latin1_fasta}",
         "--out", "{tmp}/c.npz"),
    case("contacts-fasta-empty", "contacts", "--model", "{esm}", "--fasta", "{empty_fasta}", "--out",
         "{tmp}/c.npz"),
    case("contacts-fasta-binary", "contacts", "--model", "{esm}", "--fasta", "{binary_fasta}",
         "--out", "{tmp}/c.npz"),
    case("contacts-sequence-not-protein", "contacts", "--model", "{esm}", "--sequence", "12345!",
         "--out", "{tmp}/c.npz"),
    case("contacts-structure-missing", *CONTACTS_OUT, "--structure", "{tmp}/none.pdb"),
    case("contacts-structure-garbage", *CONTACTS_OUT, "--structure", "{garbage_pdb}"),
    case("contacts-structure-unknown-chain", "contacts", "--model", "{esm}", "--structure", "{pdb}",
         "--chain", "Z", "--out", "{tmp}/c.npz"),
    case("contacts-structures-with-structure", "contacts", "--model", "{esm}", "--structures", "{tmp}",
         "--structure", "{pdb}", "--out", "{tmp}/c.npz"),
    case("contacts-no-source", "contacts", "--model", "{esm}", "--out", "{tmp}/c.npz"),
    case("contacts-text-model", "contacts", "--model", "{gpt2}", "--sequence", PROTEIN, "--out",
         "{tmp}/c.npz"),
    # --- app: every check before "serving" ------------------------------------------------------------------
    case("app-host-empty", *APP, "--host", ""),
    case("app-host-blank", *APP, "--host", "  "),
    case("app-host-unresolvable", *APP, "--host", "nonexistent.invalid"),
    case("app-host-not-ours", *APP, "--host", "10.254.254.254"),
    case("app-port-in-use", "app", "--port", "{used_port}"),
    case("app-port-zero", "app", "--port", "0"),
    case("app-port-too-big", "app", "--port", "70000"),
    case("app-upload-nan", *APP, "--upload-mb", "nan"),
    case("app-upload-inf", *APP, "--upload-mb", "inf"),
    case("app-upload-zero", *APP, "--upload-mb", "0"),
    case("app-upload-negative", *APP, "--upload-mb", "-1"),
    case("app-max-tokens-zero", *APP, "--max-tokens", "0"),
    case("app-max-residues-negative", *APP, "--max-residues", "-1"),
    case("app-labels-missing", *APP, "--model", "{gpt2}", "--labels", "{tmp}/none.csv"),
    case("app-labels-foreign", *APP, "--model", "{gpt2}", "--labels", "{tmp}/foreign.csv"),
    case("app-model-missing", *APP, "--model", "{tmp}/no-such-model"),
    # --- batch runs (issue 21): Ray, models files, probe lengths, plots, cards ------------------------------
    case("label-ray-unreachable", *LABEL_OUT, "--ray", "127.0.0.1:1"),
    case("label-ray-bad-address", *LABEL_OUT, "--ray", "nonsense"),
    case("label-ray-port-out-of-range", *LABEL_OUT, "--ray", "127.0.0.1:99999"),
    case("label-ray-workers-without-ray", *LABEL_OUT, "--ray-workers", "0"),
    case("label-ray-workers-two-without-ray", *LABEL_OUT, "--ray-workers", "2"),
    case("label-ray-workers-zero", *LABEL_OUT, "--ray", "auto", "--ray-workers", "0"),
    case("contacts-ray-unreachable", *CONTACTS_OUT, "--ray", "127.0.0.1:1"),
    case("contacts-ray-workers-without-ray", *CONTACTS_OUT, "--ray-workers", "3"),
    case("label-models-file-latin1", "label", "--models-file", "{latin1_models}", "--out", "{tmp}/r.csv"),
    case("label-models-file-binary", "label", "--models-file", "{binary_models}", "--out", "{tmp}/r.csv"),
    case("label-models-file-long-line", "label", "--models-file", "{long_models}", "--out", "{tmp}/r.csv"),
    case("label-models-file-empty", "label", "--models-file", "{empty_models}", "--out", "{tmp}/r.csv"),
    case("label-models-file-missing", "label", "--models-file", "{tmp}/none.txt", "--out", "{tmp}/r.csv"),
    case("label-models-file-is-folder", "label", "--models-file", "{tmp}/folder.csv", "--out", "{tmp}/r.csv"),
    case("label-model-name-too-long", "label", "--model", "m" * 100_000, "--out", "{tmp}/r.csv"),
    case("label-no-model", "label", "--examples", "4", "--out", "{tmp}/r.csv"),
    case("label-revisions-empty", *LABEL_OUT, "--revisions", ","),
    case("label-revisions-without-model", "label", "--models-file", "{gpt2_models}", "--revisions", "step-0",
         "--out", "{tmp}/r.csv"),
    case("label-seq-len-1", *LABEL_OUT, "--seq-len", "1"),
    case("label-seq-len-3", *LABEL_OUT, "--seq-len", "3"),
    case("label-coreference-on-protein-model", "label", "--model", "{esm}", "--types", "coreference",
         "--examples", "4", "--out", "{tmp}/r.csv"),
    case("label-plot-sibling-png-is-folder", *LABEL_OUT, "--plot", "{tmp}/plotdir.html"),
    case("label-plot-is-folder", *LABEL_OUT, "--plot", "{tmp}/plotdir.png"),
    case("label-model-config-nan", "label", "--model", "{nan_config}", "--out", "{tmp}/r.csv"),
    case("card-layers-nan-directory", "card", "--model", "{nan_config}"),
    case("card-layers-nan-json", "card", "--model", "{nan_config}/config.json"),
    case("card-layers-fraction-json", "card", "--model", "{fraction_config}"),
    case("card-seq-len-zero", "card", "--model", "{gpt2}", "--seq-len", "0"),
    case("card-batch-zero", "card", "--model", "{gpt2}", "--seq-len", "64", "--batch", "0"),
    # --- profile and train (issues 27, 32): bounds, foreign tables, nothing half written --------------------
    case("profile-random-huge", "profile", "--model", "{gpt2}", "--random", "1000000000000", "--seq-len",
         "32", "--out", "{tmp}/p.csv"),
    case("profile-window-zero", "profile", "--model", "{gpt2}", "--random", "2", "--window", "0",
         "--out", "{tmp}/p.csv"),
    case("profile-bootstrap-zero", "profile", "--model", "{gpt2}", "--random", "2", "--bootstrap", "0",
         "--out", "{tmp}/p.csv"),
    case("profile-out-foreign-csv", "profile", "--model", "{gpt2}", "--random", "2", "--seq-len", "16",
         "--out", "{tmp}/foreign.csv"),
    case("train-no-out", "train", "induction"),
    case("train-unknown-organism", "train", "bogus", "--out", "{tmp}/o"),
    case("train-relabel-untrained-folder", "train", "induction", "--relabel", "--out", "{tmp}"),
    case("train-threads-zero", "train", "induction", "--out", "{tmp}/o", "--threads", "0"),
    case("train-set-unknown-field", "train", "induction", "--out", "{tmp}/o", "--set", "bogus=1"),
    case("train-set-bad-value", "train", "induction", "--out", "{tmp}/o", "--set", "steps=many"),
    # issue 44, escape 4: every --set field checked by type and range (TrainConfig.BOUNDS), before training
    case("train-set-negative-steps", "train", "induction", "--out", "{tmp}/o", "--set", "steps=-5"),
    case("train-set-infinite-lr", "train", "induction", "--out", "{tmp}/o", "--set", "lr=inf"),
    case("train-set-nan-lr", "train", "induction", "--out", "{tmp}/o", "--set", "lr=nan"),
    case("train-set-zero-batch", "train", "induction", "--out", "{tmp}/o", "--set", "batch=0"),
    case("train-set-huge-batch", "train", "induction", "--out", "{tmp}/o", "--set", "batch=1000000000"),
    case("train-set-blocks-reversed", "train", "induction", "--out", "{tmp}/o", "--set", "min_block=30"),
    case("train-set-width-not-divisible", "train", "induction", "--out", "{tmp}/o", "--set", "n_embd=66"),
    case("train-checkpoint-steps-not-numbers", "train", "induction", "--out", "{tmp}/o", "--checkpoint-steps",
         "a"),
    case("train-checkpoint-steps-past-the-run", "train", "induction", "--out", "{tmp}/o",
         "--checkpoint-steps", "999999"),
    case("train-esm-random-checkpoints", "train", "esm-random", "--out", "{tmp}/o", "--checkpoint-steps",
         "0"),
    # --- the new surfaces (issue 32 item 7): engines, device maps, card, train, report ----------------------
    case("capture-engine-unknown", *CAPTURE_OUT, "--engine", "flash"),
    case("label-engine-unknown", *LABEL_OUT, "--engine", "bogus"),
    case("profile-engine-unknown", *PROFILE_OUT, "--engine", "turbo"),
    case("capture-engine-fused-outside-the-interface", "capture", "--model", "{bloom}", "--text", "the cat",
         "--engine", "fused", "--out", "{tmp}/a.npz"),
    case("label-engine-fused-outside-the-interface", "label", "--model", "{bloom}", "--engine", "fused",
         "--examples", "4", "--bootstrap", "20", "--ablate", "none", "--out", "{tmp}/r.csv"),
    case("profile-engine-fused-outside-the-interface", "profile", "--model", "{bloom}", "--engine", "fused",
         "--random", "2", "--seq-len", "16", "--out", "{tmp}/p.csv"),
    case("report-engine-fused-outside-the-interface", "report", "--model", "{bloom}", "--engine", "fused",
         "--out", "{tmp}/r.html"),
    case("capture-device-map-unknown", *CAPTURE_OUT, "--device-map", "everywhere"),
    case("label-device-map-unknown", *LABEL_OUT, "--device-map", "gpu9"),
    case("profile-device-map-unknown", *PROFILE_OUT, "--device-map", "nope"),
    case("capture-offload-folder-is-a-file", *CAPTURE_OUT, "--device-map", "cpu", "--offload-folder",
         "{tmp}/plain.txt"),
    case("label-offload-folder-is-a-file", *LABEL_OUT, "--device-map", "auto", "--offload-folder",
         "{tmp}/plain.txt"),
    case("capture-offload-folder-without-device-map", *CAPTURE_OUT, "--offload-folder", "{tmp}/off"),
    # (a device map that offloads some layers to disk without --offload-folder is no error: transformers 5
    # reads the offloaded weights from the checkpoint's own safetensors file. One that leaves no layer on an
    # execution device is refused: all-MiniLM-L6-v2 then failed with "Cannot copy out of meta tensor", its
    # newly initialised MLM head having no file to be read from — issue 44, escape 5)
    case("capture-max-memory-leaves-no-layer", *CAPTURE_OUT, "--device-map", "auto", "--max-memory",
         "cpu=1KiB"),
    case("label-max-memory-leaves-no-layer", *LABEL_OUT, "--device-map", "auto", "--max-memory", "cpu=1KiB"),
    # unwritable folders, before any work (issue 44, escape 5)
    case("capture-offload-folder-read-only", *CAPTURE_OUT, "--device-map", "auto", "--offload-folder",
         "{readonly}/off"),
    case("label-offload-folder-read-only", *LABEL_OUT, "--device-map", "auto", "--offload-folder",
         "{readonly}/off"),
    case("train-out-read-only", "train", "induction", "--out", "{readonly}/m"),
    case("capture-max-memory-no-equals", *CAPTURE_OUT, "--device-map", "auto", "--max-memory", "lots"),
    case("capture-max-memory-bad-amount", *CAPTURE_OUT, "--device-map", "auto", "--max-memory", "cpu=many"),
    case("capture-max-memory-empty-device", *CAPTURE_OUT, "--device-map", "auto", "--max-memory", "=1GiB"),
    case("capture-max-memory-without-device-map", *CAPTURE_OUT, "--max-memory", "cpu=1GiB"),
    case("label-max-memory-negative", *LABEL_OUT, "--device-map", "auto", "--max-memory", "cpu=-1GiB"),
    case("label-dtype-unknown", *LABEL_OUT, "--dtype", "float64"),
    case("profile-dtype-unknown", *PROFILE_OUT, "--dtype", "int8"),
    case("report-dtype-unknown", *REPORT, "--dtype", "fp4"),
    case("card-dtype-unknown", "card", "--model", "{gpt2}", "--dtype", "float64"),
    case("card-seq-len-negative", "card", "--model", "{gpt2}", "--seq-len", "-5"),
    case("card-seq-len-text", "card", "--model", "{gpt2}", "--seq-len", "abc"),
    case("train-out-is-a-file", "train", "induction", "--out", "{tmp}/plain.txt"),
    case("train-out-inside-a-file", "train", "induction", "--out", "{tmp}/plain.txt/o"),
    case("train-relabel-out-is-a-file", "train", "induction", "--relabel", "--out", "{tmp}/plain.txt"),
    case("train-relabel-folder-missing", "train", "induction", "--relabel", "--out", "{tmp}/no-such-folder"),
    case("train-relabel-folder-without-card", "train", "induction", "--relabel", "--out", "{gpt2}"),
    case("report-no-model", "report", "--out", "{tmp}/r.html"),
    case("report-no-out", "report", "--model", "{gpt2}"),
    case("report-out-not-html", "report", "--model", "{gpt2}", "--out", "{tmp}/r.pdf"),
    case("report-out-is-folder", "report", "--model", "{gpt2}", "--out", "{tmp}/folder.html"),
    case("report-out-missing-folder", "report", "--model", "{gpt2}", "--out", "{tmp}/missing/r.html"),
    case("report-out-read-only", "report", "--model", "{gpt2}", "--out", "{readonly}/r.html"),
    case("report-structure-missing", *ESM_REPORT, "--structure", "{tmp}/none.pdb"),
    case("report-structure-not-a-pdb", *ESM_REPORT, "--structure", "{garbage_pdb}"),
    case("report-structure-on-a-text-model", *REPORT, "--structure", "{pdb}"),
    case("report-labels-not-a-label-table", *REPORT, "--labels", "{tmp}/foreign.csv"),
    case("report-labels-missing", *REPORT, "--labels", "{tmp}/none.csv"),
    case("report-text-missing", *REPORT, "--text", "{tmp}/none.txt"),
    case("report-text-not-utf8", *REPORT, "--text", "{latin1_fasta}"),
    case("report-seq-len-zero", *REPORT, "--seq-len", "0"),
    case("report-model-missing", "report", "--model", "{tmp}/no-such-model", "--out", "{tmp}/r.html"),
    case("label-report-several-models", *LABEL_OUT, "--model", "{esm}", "--report", "{tmp}/r.html"),
    case("label-report-not-html", *LABEL_OUT, "--report", "{tmp}/r.txt"),
    case("label-report-read-only", *LABEL_OUT, "--report", "{readonly}/r.html"),
    # --- history (issue 42): checkpoints, positions, tables ----------------------------------------------
    case("history-no-arguments", "history"),
    case("history-model-missing", "history", "--model", "{tmp}/no-such-model"),
    case("history-model-is-a-file", "history", "--model", "{tmp}/plain.txt"),
    case("history-model-without-checkpoints", "history", "--model", "{gpt2}"),
    case("history-revisions-empty", *HISTORY, "--revisions", ",,"),
    case("history-icl-positions-one", *HISTORY, "--icl-positions", "12"),
    case("history-icl-positions-reversed", *HISTORY, "--icl-positions", "120,12"),
    case("history-icl-positions-zero", *HISTORY, "--icl-positions", "0,12"),
    case("history-examples-zero", *HISTORY, "--examples", "0"),
    case("history-bootstrap-zero", *HISTORY, "--bootstrap", "0"),
    case("history-passages-zero", *HISTORY, "--passages", "0"),
    case("history-text-unknown", *HISTORY, "--text", "english"),
    case("history-out-not-a-table", *HISTORY, "--out", "{tmp}/h.txt"),
    case("history-out-is-folder", *HISTORY, "--out", "{tmp}/folder.csv"),
    case("history-out-foreign-csv", *HISTORY, "--out", "{tmp}/foreign.csv"),
    # --- circuit (issue 41) ---------------------------------------------------------------------------------
    case("circuit-no-arguments", "circuit"),
    case("circuit-no-type", "circuit", "--model", "{gpt2}"),
    case("circuit-model-missing", "circuit", "--model", "{tmp}/no-such-model", "--type", "induction"),
    case("circuit-type-unknown", "circuit", "--model", "{gpt2}", "--type", "bogus"),
    case("circuit-modes-unknown", *CIRCUIT, "--modes", "X"),
    case("circuit-top-k-negative", *CIRCUIT, "--top-k", "-1"),
    case("circuit-examples-zero", *CIRCUIT, "--examples", "0"),
    case("circuit-controls-one", *CIRCUIT, "--controls", "1"),
    case("circuit-out-not-a-table", *CIRCUIT, "--out", "{tmp}/c.txt"),
    case("circuit-html-not-html", *CIRCUIT, "--html", "{tmp}/c.txt"),
    case("circuit-labels-missing", *CIRCUIT, "--labels", "{tmp}/none.csv"),
    case("circuit-composition-is-folder", *CIRCUIT, "--composition", "{tmp}/folder.csv"),
    # --- issue 55: outputs a command did not write, checkpoints of one model, inputs that fit -------------
    case("circuit-out-foreign-csv", *CIRCUIT, "--out", "{tmp}/foreign.csv"),
    case("circuit-composition-foreign-parquet", *CIRCUIT, "--composition", "{tmp}/foreign.parquet"),
    case("circuit-html-users-own-page", *CIRCUIT, "--html", "{tmp}/mine.html"),
    case("circuit-out-label-table", *CIRCUIT, "--out", "{tmp}/labels.csv"),
    case("circuit-seq2seq-model", "circuit", "--model", "{t5}", "--type", "induction"),
    case("history-checkpoint-of-another-model", "history", "--model", "{alien_checkpoints}", "--out",
         "{tmp}/h.csv"),
    case("history-revisions-outside-the-run", *HISTORY, "--revisions", "step-0,../alien-checkpoints/step-5",
         "--out", "{tmp}/h.csv"),
    case("history-icl-positions-past-the-model", "history", "--model", "{alien_checkpoints}", "--revisions",
         "step-0,step-1", "--icl-positions", "12,500", "--out", "{tmp}/h.csv"),
    case("history-tokenizer-reads-unknown-tokens", *HISTORY, "--examples", "4", "--bootstrap", "20",
         "--passages", "2", "--out", "{tmp}/h.csv"),
    case("report-structure-with-another-proteins-text", *ESM_REPORT, "--structure", "{pdb}", "--text",
         "{other_protein}"),
    case("label-retrieval-needles-longer-than-seq-len", *LABEL_OUT, "--types", "previous_token,retrieval",
         "--seq-len", "12"),
    case("label-retrieval-on-a-masked-lm", "label", "--model", "sentence-transformers/all-MiniLM-L6-v2",
         "--types", "retrieval", "--out", "{tmp}/r.csv"),
    case("report-structure-on-minilm", "report", "--model", "sentence-transformers/all-MiniLM-L6-v2",
         "--structure", "{pdb}", "--out", "{tmp}/r.html"),
    case("capture-device-map-everything-on-disk", *CAPTURE_OUT, "--device-map", "auto", "--max-memory",
         "cpu=1KiB", "--offload-folder", "{tmp}/offload"),
]


def free_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return probe_socket.getsockname()[1]


def readonly_folder(base: Path) -> str:
    """A folder no file can be created in: a chmod 555 folder, or (as root, who ignores permission bits)
    /sys."""
    folder = base / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (str(folder), "/sys"):
        try:
            handle, tmp = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(handle)
        os.unlink(tmp)
    pytest.skip("no read-only folder on this machine")


def damaged_copy(source: Path, target: Path, keep_bytes: int | None) -> str:
    """A copy of a saved model whose safetensors file is cut to `keep_bytes` (None: overwritten with
    noise)."""
    shutil.copytree(source, target)
    weights = target / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:keep_bytes] if keep_bytes is not None
                        else bytes(random.Random(0).randbytes(len(data))))
    return str(target)


@pytest.fixture(scope="module")
def assets(tiny_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("reliability")
    gpt2, esm = Path(tiny_dir("gpt2")), Path(tiny_dir("esm"))
    files = {
        "gpt2": str(gpt2), "esm": str(esm),
        "corrupt_gpt2": damaged_copy(gpt2, base / "corrupt-gpt2", None),
        "truncated_gpt2": damaged_copy(gpt2, base / "truncated-gpt2", 200),
        "corrupt_esm": damaged_copy(esm, base / "corrupt-esm", None),
        "readonly": readonly_folder(base),
        "bloom": save_tiny_arch("bloom", base / "bloom"),  # attention outside AttentionInterface
        "checkpoints": str(base / "checkpoints"),  # what `probe train` writes: step-N/ model folders
    }
    shutil.copytree(gpt2, base / "checkpoints" / "step-0")
    # a run whose step-5 is of another model (a tiny Llama beside a tiny GPT-2)
    shutil.copytree(gpt2, base / "alien-checkpoints" / "step-0")
    shutil.copytree(gpt2, base / "alien-checkpoints" / "step-1")
    shutil.copytree(tiny_dir("llama"), base / "alien-checkpoints" / "step-5")
    files["alien_checkpoints"] = str(base / "alien-checkpoints")
    files["t5"] = save_tiny_arch("t5", base / "t5")  # a sequence-to-sequence model
    texts = {
        "fasta": (">a\n" + PROTEIN + "\n").encode(),
        "latin1_fasta": ">prot\xe9ine\nMKTAYIAK\n".encode("latin-1"),
        "empty_fasta": b"",
        "binary_fasta": b"\x00\x01\x02PK\x03\x04",
        "garbage_pdb": b"this is not a structure file\n",
        "pdb": compact_synthetic_pdb(PROTEIN).encode(),
        "other_protein": b">another protein\nGSWWPDNHCYEFGGRWWPPTDHCYKGGSWNNPEDCHWYQ\n",
        "latin1_jsonl": '{"text": "caf\xe9 a b", "query": [2, 3], "target": [0, 1]}\n'.encode("latin-1"),
        "bad_jsonl": b'{"text": "a b", "query": [2, 3\n',
        "good_jsonl": b'{"text": "a b", "query": [2, 3], "target": [0, 1]}\n',
        "latin1_models": f"{gpt2}\n/data/mod\xe8le\n".encode("latin-1"),
        "binary_models": b"\x00\x01\x02PK\x03\x04",
        "long_models": f"{gpt2}\n{'m' * 100_000}\n".encode(),
        "empty_models": b"# nothing here\n\n",
        "gpt2_models": f"{gpt2}\n".encode(),
        "fraction_config": b'{"model_type": "gpt2", "n_layer": 2.5, "n_head": 2, "n_embd": 8}\n',
    }
    suffix = {"pdb": ".pdb", "garbage_pdb": ".pdb", "latin1_jsonl": ".jsonl", "bad_jsonl": ".jsonl",
              "good_jsonl": ".jsonl", "latin1_models": ".txt", "binary_models": ".txt", "long_models": ".txt",
              "empty_models": ".txt", "gpt2_models": ".txt", "fraction_config": ".json"}
    for name, data in texts.items():
        path = base / f"{name}{suffix.get(name, '.fa')}"
        path.write_bytes(data)
        files[name] = str(path)
    nan_config = base / "nan-config"  # a model directory whose config has num_hidden_layers: NaN
    shutil.copytree(gpt2, nan_config)
    config = (nan_config / "config.json").read_text()
    import json as _json

    data = _json.loads(config)
    data.pop("n_layer", None)
    data["num_hidden_layers"] = float("nan")
    (nan_config / "config.json").write_text(_json.dumps(data))  # json writes NaN, as the file had
    files["nan_config"] = str(nan_config)
    yield files
    (base / "readonly").chmod(0o755)  # so pytest can clean up


@pytest.fixture(scope="module")
def used_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def never_serve(monkeypatch):
    """`probe app` must fail before serving: a case that reaches Dash's run fails instead of hanging."""
    import dash

    def refuse(*args, **kwargs):
        raise AssertionError("the app started serving: a bad input passed every check")

    monkeypatch.setattr(dash.Dash, "run", refuse)


def prepare_output_folder(tmp: Path) -> None:
    """Files a careless user might point --out at (each must be left exactly as it was)."""
    (tmp / "folder.npz").mkdir()
    (tmp / "folder.csv").mkdir()
    (tmp / "folder.html").mkdir()
    (tmp / "plain.txt").write_text("just text\n")
    (tmp / "notzip.npz").write_bytes(b"not a zip archive at all\n")
    (tmp / "foreign.csv").write_text("name,age\nada,36\n")
    (tmp / "foreign.parquet").write_bytes(b"definitely not parquet\n")
    (tmp / "foreign.json").write_text('{"name": "ada"}\n')
    (tmp / "plotdir.png").mkdir()  # --plot plotdir.html would also write plotdir.png
    (tmp / "mine.html").write_text("<!doctype html><title>my notes</title><p>mine</p>\n")
    (tmp / "labels.csv").write_text("model,layer,head,head_name,head_type,score,label\n"
                                    "m,0,0,L0H0,induction,0.9,True\n")  # another command's table


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` (hidden ones too) with its bytes (None for folders)."""
    return {str(path.relative_to(folder)): (None if path.is_dir() else path.read_bytes())
            for path in sorted(folder.rglob("*"))}


def fill(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [part.format(**values) if "{" in part else part for part in argv]


def check_bad_input(code: int, out: str, err: str, before: dict, after: dict, argv: list[str]) -> None:
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code} for {argv}: {err}"
    assert len(lines) == 1, f"{len(lines)} stderr lines for {argv}:\n{err}"
    assert lines[0].startswith("probe") and "error" in lines[0] and "internal error" not in lines[0], lines[0]
    assert out == "", f"stdout for {argv}: {out[:200]}"
    assert after == before, f"files changed by {argv}: {sorted(set(after) ^ set(before))}"


@pytest.mark.parametrize(
    "bad", [pytest.param(c, id=c.name) for c in CASES])
def test_bad_input_is_one_line_and_exit_2(bad, assets, used_port, never_serve, tmp_path, capsys):
    prepare_output_folder(tmp_path)
    values = {**assets, "tmp": str(tmp_path), "used_port": str(used_port), "free_port": str(free_port())}
    argv = fill(bad.argv, values)
    before = snapshot(tmp_path)
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    if os.environ.get("PROBE_SHOW_ERRORS"):  # a file to review every message by eye
        with open(os.environ["PROBE_SHOW_ERRORS"], "a") as log:
            log.write(f"{bad.name}: {captured.err}")
    check_bad_input(code, captured.out, captured.err, before, snapshot(tmp_path), argv)


def test_the_table_is_large_and_covers_every_subcommand():
    assert len(CASES) >= 150
    assert len({c.name for c in CASES}) == len(CASES)
    for command in ("capture", "label", "contacts", "app", "report", "train"):
        assert sum(1 for c in CASES if c.argv[:1] == (command,)) >= 10, command
    from probe.cli import SUBCOMMANDS

    for command in SUBCOMMANDS:  # every subcommand, the newer ones too (card, profile)
        assert sum(1 for c in CASES if c.argv[:1] == (command,)) >= 8, command
    for flag in ("--engine", "--device-map", "--offload-folder", "--max-memory", "--dtype", "--report"):
        # the shared model flags, on several commands
        assert sum(1 for c in CASES if flag in c.argv) >= 3, flag


def test_app_empty_host_never_falls_back_to_the_host_variable(monkeypatch, never_serve, capsys):
    """Dash's run() reads $HOST when host is falsy: `--host ""` with HOST=0.0.0.0 would have served on every
    interface. It is refused before anything else, in one clean line."""
    monkeypatch.setenv("HOST", "0.0.0.0")
    assert main(["app", "--host", "", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err == ("probe app: error: --host is empty: give an address to bind, e.g. 127.0.0.1 (this machine "
                   "only)\n")


# A real process costs ~5-15 s of imports on a busy machine: two cases, argparse's exit path and the app's
# bind.
SUBPROCESS_CASES = ["label-bad-ablate", "app-port-in-use", "label-ray-unreachable",
                    # refused before MiniLM's loading note (the logger's: seen in a real process only)
                    "label-retrieval-on-a-masked-lm", "report-structure-on-minilm"]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_bad_input_in_a_real_process(name, assets, used_port, tmp_path):
    """The same contract from a real `probe` process: argparse's exit path, warnings and werkzeug are all
    real."""
    bad = next(c for c in CASES if c.name == name)
    prepare_output_folder(tmp_path)
    values = {**assets, "tmp": str(tmp_path), "used_port": str(used_port), "free_port": str(free_port())}
    argv = fill(bad.argv, values)
    before = snapshot(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="default")
    result = subprocess.run([sys.executable, "-m", "probe.cli", *argv], capture_output=True, text=True,
                            env=env, timeout=120, cwd=tmp_path)
    check_bad_input(result.returncode, result.stdout, result.stderr, before, snapshot(tmp_path), argv)


# ------------------------------------------------------------------------------------------------------------
# SIGKILL at random moments, then resume: the result equals an uninterrupted run
# ------------------------------------------------------------------------------------------------------------


def journal_units(out: Path) -> int:
    from probe.runs.journal import Journal

    parts = out.parent / f".{out.name}.parts"
    return len(Journal(out).units()) if parts.is_dir() else 0


def kill_at_random(argv: list[str], out: Path, rng: random.Random, cwd: Path) -> bool:
    """Start `probe argv`, wait until it has finished a unit (journal) or written `out`, then SIGKILL it after
    a random delay. True if it was killed, False if it finished first."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen([sys.executable, "-m", "probe.cli", *argv], env=env, cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if journal_units(out) > 0 or out.exists():
            break
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 0.8))
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    return True


def resume_after_kills(argv: list[str], out: Path, kills: int, seed: int, cwd: Path,
                       capsys) -> tuple[int, list]:
    """Kill the run `kills` times (bounded tries), checking after each kill that no output is half-written and
    no finished unit was lost; then finish it in-process. Returns (kills done, unit counts seen)."""
    rng = random.Random(seed)
    done, counts, tries = 0, [], 0
    while done < kills and tries < 3 * kills:
        tries += 1
        if not kill_at_random(argv, out, rng, cwd):
            shutil.rmtree(out.parent / f".{out.name}.parts", ignore_errors=True)  # finished: start over
            out.unlink(missing_ok=True)
            counts = []
            continue
        done += 1
        assert readable(out), f"{out.name} is half-written after a SIGKILL"
        counts.append(journal_units(out))
        assert counts == sorted(counts), f"a finished unit was lost by a kill: {counts}"
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.") and p.is_file()]
    assert not leftovers, f"temporary files of the killed runs are still there: {leftovers}"
    return done, counts


def readable(path: Path) -> bool:
    """Absent, or a whole file of its format."""
    if not path.exists():
        return True
    try:
        if path.suffix == ".npz":
            with np.load(path) as archive:
                return all(archive[name].size >= 0 for name in archive.files)
        (pd.read_parquet if path.suffix == ".parquet" else pd.read_csv)(path)
    except Exception:  # noqa: BLE001 - any failure to read is the finding
        return False
    return True


def test_write_atomically_removes_what_a_killed_writer_left(tmp_path):
    from probe.runs.atomic import write_atomically

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    out = tmp_path / "r.csv"
    stale = tmp_path / f".r.csv.{int(dead.stdout)}.abc123.csv"  # what a SIGKILL mid-write leaves
    live = tmp_path / f".r.csv.{os.getpid()}.def456.csv"  # another writer still at work
    journal = tmp_path / ".r.csv.parts"
    stale.write_text("half")
    live.write_text("busy")
    journal.mkdir()
    write_atomically(out, lambda tmp: tmp.write_text("x,y\n1,2\n"))
    assert out.read_text() == "x,y\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name, journal.name])


KILLED_REPORT_WRITER = """
import os, pathlib, signal, sys
import probe.views.report as report

report.report_html = lambda *args, **kwargs: "<html>" + "x" * 1_000_000 + "</html>"

def half_then_killed(self, text, encoding=None):
    with open(self, "w", encoding=encoding) as handle:
        handle.write(text[: len(text) // 2])
        handle.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # the writer dies mid-page

pathlib.Path.write_text = half_then_killed
report.write_report(None, sys.argv[1])
"""


def test_a_killed_report_writer_leaves_no_partial_report(tmp_path, monkeypatch):
    """probe report / probe label --report write through probe.runs.atomic: a SIGKILL mid-write leaves no
    report.html (an older one stays whole), and the next write clears the dead writer's temporary file."""
    import probe.views.report as report

    out = tmp_path / "report.html"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for previous in (None, "<html>the old report</html>"):
        if previous is not None:
            out.write_text(previous)
        result = subprocess.run([sys.executable, "-c", KILLED_REPORT_WRITER, str(out)], env=env, timeout=120,
                                capture_output=True, text=True)
        assert result.returncode == -signal.SIGKILL, result.stderr
        left = [p for p in tmp_path.iterdir() if p != out]
        assert len(left) == 1 and left[0].name.startswith(".report.html.")  # the dead writer's half page
        assert left[0].stat().st_size > 0
        assert (out.read_text() if out.exists() else None) == previous  # never a half-written report
        monkeypatch.setattr(report, "report_html", lambda *args, **kwargs: "<html>new</html>")
        report.write_report(None, out)
        assert sorted(p.name
            for p in tmp_path.iterdir()) == ["report.html"] and out.read_text() == "<html>new</html>"
        out.unlink()


@pytest.fixture(scope="module")
def label_models(tiny_dir):
    return [str(tiny_dir("gpt2", seed=seed)) for seed in range(3)]


def test_label_survives_repeated_sigkill(label_models, tmp_path, capsys):
    common = ["--examples", "8", "--bootstrap", "50", "--types", "previous_token,induction", "--seq-len",
              "16", "--ablate", "none"]
    argv = ["label", *[part for model in label_models for part in ("--model", model)], *common]
    reference = tmp_path / "reference.csv"
    assert main([*argv, "--out", str(reference)]) == 0
    out = tmp_path / "killed.csv"
    kills, counts = resume_after_kills([*argv, "--out", str(out)], out, kills=3, seed=1, cwd=tmp_path,
                                       capsys=capsys)
    assert kills == 3, "the run finished before every kill: make it longer"
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(reference))


def test_contacts_survives_repeated_sigkill(tiny_dir, tmp_path, capsys):
    rng = random.Random(0)
    fasta = tmp_path / "set.fa"
    fasta.write_text("".join(f">p{i}\n{''.join(rng.choice('ACDEFGHIKLMNPQRSTVWY') for _ in range(60))}\n"
                             for i in range(16)))
    argv = ["contacts", "--model", str(tiny_dir("esm")), "--fasta", str(fasta)]
    reference = [tmp_path / "reference.npz", tmp_path / "reference.parquet"]
    assert main([*argv, "--out", str(reference[0]), "--heads-out", str(reference[1])]) == 0
    out = [tmp_path / "killed.npz", tmp_path / "killed.parquet"]
    kills, counts = resume_after_kills([*argv, "--out", str(out[0]), "--heads-out", str(out[1])], out[0],
                                       kills=3, seed=2, cwd=tmp_path, capsys=capsys)
    assert kills == 3, "the run finished before every kill: make it longer"
    assert counts and counts[-1] > 0, "nothing was kept after a SIGKILL"
    with np.load(out[0]) as got, np.load(reference[0]) as expected:
        assert sorted(got.files) == sorted(expected.files)
        for name in expected.files:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    pd.testing.assert_frame_equal(pd.read_parquet(out[1]), pd.read_parquet(reference[1]))


@pytest.mark.soak
def test_soak():
    """benchmarks/soak.py with its defaults: repeated SIGKILL/resume of label and contacts, then 20 users × 60
    s."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "soak.py")], capture_output=True,
                            text=True, timeout=1800, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# ------------------------------------------------------------------------------------------------------------
# Batch runs (issues 21 and 22): Ray failures are fast and quiet, models files name their line, nothing of Ray
# outlives its driver
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["label", "contacts"])
def test_an_unreachable_ray_address_is_one_line_within_ten_seconds(command, assets, tmp_path, capsys):
    argv = {"label": [*LABEL, "--out", str(tmp_path / "r.csv")],
            "contacts": [*CONTACTS, "--out", str(tmp_path / "c.npz")]}[command]
    argv = fill(tuple(argv), {**assets, "tmp": str(tmp_path)})
    capsys.readouterr()
    started = time.monotonic()
    code = main([*argv, "--ray", "127.0.0.1:1"])
    seconds = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "cannot join Ray at 127.0.0.1:1" in err and "rpc_client" not in err
    assert seconds < 10, f"{seconds:.1f} s"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"])
def test_a_port_that_is_not_ray_is_one_line_within_ten_seconds(answer, assets, tmp_path, capsys):
    """Something listens there but is not Ray (silent, or an HTTP/1 server): the HTTP/2 check that Ray's GCS
    answers fails in seconds, before Ray is imported, instead of Ray's client retrying for a minute."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    held = []

    def serve():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)
            if answer:
                connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        argv = fill((*LABEL, "--out", "{tmp}/r.csv"), {**assets, "tmp": str(tmp_path)})
        capsys.readouterr()
        started = time.monotonic()
        code = main([*argv, "--ray", f"127.0.0.1:{port}"])
        seconds = time.monotonic() - started
    finally:
        listener.close()
        for connection in held:
            connection.close()
    err = capsys.readouterr().err
    assert code == 2 and len(
        err.strip().splitlines()) == 1 and f"cannot join Ray at 127.0.0.1:{port}" in err, err
    assert seconds < 10, f"{seconds:.1f} s"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, message", [
    ("zoo:induction\n/data/mod\xe8le\n".encode("latin-1"), "line 2: not UTF-8 text"),
    (b"zoo:induction\n\x00\x01", "line 2: not text (a NUL byte)"),
    (("zoo:induction\n" + "m" * 100_000 + "\n").encode(), "line 2: 100000 characters long"),
    (b"# only a comment\n", "lists no models"),
])
def test_models_file_errors_name_the_file_and_the_line(content, message, tmp_path, capsys):
    listing = tmp_path / "models.txt"
    listing.write_bytes(content)
    assert main(["label", "--models-file", str(listing)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--models-file {listing}" in err and message in err, err


def test_label_seq_len_too_short_is_one_line_without_notes(assets, tmp_path, capsys):
    """The unit's notes (random-token probes on this tokenizer) are said only when it succeeds."""
    for length in ("1", "3"):
        assert main([*fill(LABEL, assets), "--seq-len", length, "--out", str(tmp_path / "r.csv")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--seq-len {length} is too short" in err, err


RAY_DRIVER = """
import sys, time
from probe.runs.ray_executor import RayExecutor, RayOptions
executor = RayExecutor(RayOptions(num_cpus=1, object_store_bytes=80 * 2**20))
executor.prepare()
import ray
print(ray.get_runtime_context().gcs_address, flush=True)
from probe.runs import ray_executor
print(ray_executor._watchdog["process"].args[3], flush=True)  # python -m module SESSION_DIR DRIVER_PID
time.sleep(600)
"""


def _tree(root: int) -> dict[int, int]:
    """Every process below `root` (read from /proc, independently of the watchdog): pid -> start time."""
    table = {}
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if text:
            fields = text[text.rindex(")") + 2:].split()
            table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    found, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                todo.append(pid)
    return found


def _alive(pid: int, start: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return int(text[text.rindex(")") + 2:].split()[19]) == start


@pytest.mark.ray
def test_nothing_of_ray_outlives_a_sigkilled_driver(tmp_path):
    """Issues 22 and 32: a driver that started a local Ray instance is SIGKILLed; 10 s later no process of
    that Ray session runs — raylet, GCS, workers, and the dashboard and runtime-env agents, whose command
    lines Ray rewrites to bare titles that do not name the session. Every process below the driver is found by
    the process tree, recorded (pid and start time) before the kill."""
    pytest.importorskip("ray")
    from probe.runs.ray_watchdog import session_processes

    env = dict(os.environ, PYTHONPATH=str(REPO))
    driver = subprocess.Popen([sys.executable, "-c", RAY_DRIVER], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        driver.stdout.readline()
        session = Path(driver.stdout.readline().strip()).name
        assert session.startswith("session_"), driver.stderr.read()[-2000:]
        assert len(session_processes(session)) >= 3  # raylet, GCS, agents (and the watchdog is not counted)
        deadline = time.monotonic() + 30
        tree = _tree(driver.pid)
        while time.monotonic() < deadline and not any(
                Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::") for pid in tree
                if Path(f"/proc/{pid}").exists()):
            time.sleep(0.2)  # the agents start a moment after ray.init returns
            tree = _tree(driver.pid)
        titled = [pid for pid in tree if Path(f"/proc/{pid}").exists()
                  and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")]
        assert titled, "no ray:: titled process below the driver: the test no longer covers the agents"
        time.sleep(1.0)  # the watchdog polls the tree every 0.25 s
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid, start) for pid, start in tree.items()):
        time.sleep(0.2)
    left = [pid for pid, start in tree.items() if _alive(pid, start)]
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in left
                      if Path(f"/proc/{pid}").exists()]
    assert not session_processes(session)
