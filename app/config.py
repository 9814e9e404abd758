"""The dashboard's configuration: what `probe app` flags set (a frozen dataclass, shared by every module)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AppConfig:
    """What `probe app` flags set."""

    # model specs; empty: the bundled model organisms (or locally built tiny models)
    models: tuple[str, ...] = ()
    labels: str | None = None  # a labels table written by `probe label` (.csv, .parquet or .json)
    device: str = "cpu"
    max_tokens: int = 1024  # longest text input the explorer captures (tokens, special tokens included)
    max_residues: int = 1022  # longest protein the protein view runs
    upload_bytes: int = 5 * 2**20  # largest accepted upload (structure or FASTA)
    cache_bytes: int = 256 * 2**20  # memory budget of the capture cache
    cache_entries: int = 32  # and its entry limit
    label_examples: int = 64  # probe examples per probe set when labelling on demand (probe label --examples)
    heads_summary: str | None = None  # a per-head structure-set summary from `probe contacts --heads-summary`
    history: str | None = None  # a training history from `probe history --out`: the history panel
    history_control: str | None = None  # another model's history (the 1-layer control), drawn beside it
    # Sharing (docs/app.md, "Sharing the dashboard"):
    token: str | None = None  # every request must carry this secret (set beyond loopback: probe app --host)
    max_jobs: int = 4  # labelling jobs and circuit searches queued or running at once; more are refused
    upload_memory_bytes: int = 64 * 2**20  # uploaded files kept in memory, all together (oldest dropped)
