"""Which models a batch names: checkpoints (a model, optionally one of its revisions), the training step of
each, the content identity of its weights, and the ``--models-file`` reader.

A revision is a subdirectory of a local model directory (what ``probe train NAME --checkpoint-steps`` writes:
DIR/step-N/) or a hub branch, tag or commit (Pythia publishes ``step1000`` ... ``step143000``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from probe import models
from probe.errors import ProbeError
from probe.hashing import weight_files, weights_hash, weights_identity

_STEP = re.compile(r"(?:^|[^a-z])(?:step|checkpoint|global_step|iter)[-_]?(\d+)$", re.IGNORECASE)
MAX_LINE = 4096  # characters of one --models-file line (a path or a hub id is far shorter)


def checkpoint_step(name: str | None, directory: Path | None = None) -> int | None:
    """The training step of a checkpoint: card.json's "step" in its directory (what probe.training writes),
    else the number in a name like step-50, step143000 (Pythia's branches) or checkpoint-500 (HF Trainer);
    else None."""
    if directory is not None and (directory / "card.json").is_file():
        try:
            step = json.loads((directory / "card.json").read_text()).get("step")
        except (OSError, ValueError):
            step = None
        if isinstance(step, int):
            return step
    match = _STEP.search(Path(name).name) if name else None
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Checkpoint:
    """One model to label: `spec` as for --model, `revision` a hub branch/tag/commit or a subdirectory of a
    local `spec` (None: the model as is), `step` its training step when known."""

    spec: str
    revision: str | None = None
    step: int | None = None

    @property
    def key(self) -> str:
        """The unit key: the spec, or spec@revision."""
        return self.spec if self.revision is None else f"{self.spec}@{self.revision}"

    @property
    def name(self) -> str:
        """The checkpoint column: the revision, or the directory's name for a plain model."""
        return self.revision if self.revision is not None else Path(self.spec.rstrip("/")).name


def local_directory(spec: str) -> Path | None:
    """The directory a spec names (a local path or zoo:NAME), or None for a hub id or a missing path."""
    try:
        path = Path(models.resolve(spec)).expanduser()
        return path if path.is_dir() else None
    except (ProbeError, OSError):
        return None


def local_revision(spec: str, revision: str) -> Path | None:
    """spec/revision when `spec` is a local directory (or zoo:NAME) holding that checkpoint directory."""
    base = local_directory(spec)
    if base is None:
        return None
    candidate = base / revision
    try:
        return candidate if (candidate / "config.json").is_file() else None
    except OSError:
        return None


def checkpoint_directory(checkpoint: Checkpoint) -> Path | None:
    """The local directory holding the checkpoint's weights (None for the hub)."""
    if checkpoint.revision is None:
        return local_directory(checkpoint.spec)
    return local_revision(checkpoint.spec, checkpoint.revision)


def checkpoint_revision(checkpoint: Checkpoint) -> str | None:
    """The revision a checkpoint's rows will carry, known without loading it: the content hash of a local
    directory's weights (:func:`probe.hashing.weights_hash`, what :func:`probe.models.load` records), or a hub
    model's commit when it is in the local cache; None when it cannot be known before loading."""
    directory = checkpoint_directory(checkpoint)
    if directory is not None:
        return weights_hash(directory)
    try:
        from huggingface_hub import try_to_load_from_cache  # inside the try: no hub library is "unknown"

        found = try_to_load_from_cache(checkpoint.spec, "config.json", revision=checkpoint.revision)
    except Exception:  # noqa: BLE001 - not a hub id, no cache, no huggingface_hub: unknown before loading
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def checkpoint_weights(checkpoint: Checkpoint) -> str | None:
    """The identity of a checkpoint's weight bytes (:func:`probe.hashing.weights_identity`): of its local
    directory, or of its snapshot in the Hugging Face cache (after loading, it is there); None when neither is
    found."""
    directory = checkpoint_directory(checkpoint)
    if directory is None:
        try:
            from huggingface_hub import try_to_load_from_cache  # inside the try, as above

            found = try_to_load_from_cache(checkpoint.spec, "config.json", revision=checkpoint.revision)
        except Exception:  # noqa: BLE001 - not a hub id, no cache, no huggingface_hub: unknown
            return None
        directory = Path(found).parent if isinstance(found, str) else None
    if directory is None or not weight_files(directory):
        return None
    return weights_identity(directory)


def make_checkpoint(spec: str, revision: str | None = None) -> Checkpoint:
    """A Checkpoint with its step read from its directory or its name."""
    directory = checkpoint_directory(Checkpoint(spec, revision))
    return Checkpoint(spec, revision, checkpoint_step(revision or spec, directory))


def parse_revisions(text: str) -> list[str]:
    """"step-0, step-50" -> ["step-0", "step-50"] (duplicates dropped)."""
    revisions = [part.strip() for part in text.split(",") if part.strip()]
    if not revisions:
        raise ProbeError("--revisions is empty; give comma-separated revisions, e.g. step-0,step-50")
    return list(dict.fromkeys(revisions))


def read_models_file(path: str) -> list[str]:
    """The non-empty, non-comment lines of a --models-file: UTF-8 text, one model directory or hub id per
    line. One-line ProbeError naming the file and the line for anything else (another encoding, binary, a huge
    line)."""
    file = Path(path).expanduser()
    try:
        if not file.is_file():
            raise ProbeError(f"--models-file {path} does not exist (or is not a file)")
        data = file.read_bytes()
    except OSError as error:
        raise ProbeError(f"--models-file {path}: cannot read it ({error.strerror or error})") from None
    if b"\x00" in data:
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise ProbeError(f"--models-file {path} line {line}: not text (a NUL byte); give one model directory "
                         "or hub id per line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise ProbeError(
            f"--models-file {path} line {line}: not UTF-8 text; save the file as UTF-8") from None
    specs = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if len(line) > MAX_LINE:
            raise ProbeError(f"--models-file {path} line {number}: {len(line)} characters long; give one "
                             "model directory or hub id per line")
        if line:
            specs.append(line)
    if not specs:
        raise ProbeError(f"--models-file {path} lists no models (one directory or hub id per line)")
    return specs


def sweep_checkpoints(models: list[str] | None, revisions: str | None = None,
                      models_file: str | None = None) -> list[Checkpoint]:
    """The checkpoints the flags name, in order: each --model × each revision, then the --models-file
    lines."""
    specs = list(dict.fromkeys(models or []))
    if revisions is not None and not specs:
        raise ProbeError("--revisions needs --model: the model whose checkpoints they are")
    checkpoints = []
    for spec in specs:
        for revision in parse_revisions(revisions) if revisions is not None else [None]:
            checkpoints.append(make_checkpoint(spec, revision))
    if models_file is not None:
        checkpoints += [make_checkpoint(spec) for spec in read_models_file(models_file)]
    if not checkpoints:
        raise ProbeError("nothing to label: give --model or --models-file")
    return list({c.key: c for c in checkpoints}.values())


__all__ = ["Checkpoint", "checkpoint_directory", "checkpoint_revision", "checkpoint_step", "local_revision",
           "make_checkpoint", "parse_revisions", "read_models_file", "sweep_checkpoints"]
