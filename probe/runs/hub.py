"""Loading one checkpoint: a local model, a checkpoint subdirectory of it, or a hub revision (downloaded with
huggingface_hub to the usual cache)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from huggingface_hub import snapshot_download

from probe import models
from probe.errors import ProbeError, first_line
from probe.runs.checkpoints import Checkpoint, local_revision


def load_checkpoint(checkpoint: Checkpoint, device: str = "cpu", dtype: str | None = None, **placement):
    """probe.models.load for one checkpoint; the LoadedModel keeps the user's spec as its name. `placement`:
    load's engine / device_map / offload_folder / max_memory keywords."""
    if checkpoint.revision is None:
        return models.load(checkpoint.spec, device=device, dtype=dtype, **placement)
    directory = local_revision(checkpoint.spec, checkpoint.revision)
    if directory is not None:
        return replace(models.load(str(directory), device=device, dtype=dtype, **placement),
                       name=checkpoint.spec)
    if Path(checkpoint.spec).expanduser().exists() or checkpoint.spec.startswith(models.ZOO_PREFIX):
        raise ProbeError(f"{checkpoint.spec} has no checkpoint directory {checkpoint.revision!r} (with a "
                         "config.json); list its step-N folders or pass --models-file")
    try:
        path = Path(snapshot_download(checkpoint.spec, revision=checkpoint.revision))
    except Exception as error:  # noqa: BLE001 - hub errors (offline, unknown revision) come in many types
        raise ProbeError(f"cannot fetch revision {checkpoint.revision!r} of {checkpoint.spec}: "
                         f"{first_line(error)}") from None
    loaded = models.load(str(path), device=device, dtype=dtype, **placement)
    return replace(loaded, name=checkpoint.spec, revision=path.name)  # snapshots/<commit hash>
