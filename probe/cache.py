"""Where probe keeps what it computes once per machine: ``$PROBE_CACHE`` or ``~/.cache/probe``.

Two things live there: the fused CPU tile kernel built for this torch and CPU (``tiles/``,
:mod:`probe.engine.tiles`) and the weight-only stages of a labelling run (``weights/``,
:mod:`probe.heads.weight_stages`: measurements that read a model's weights and no input, keyed by the weights'
content). Deleting the folder loses nothing but time.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$PROBE_CACHE`` when set, else ``~/.cache/probe`` (not created here).

    Examples
    --------
    >>> import os
    >>> os.environ["PROBE_CACHE"] = "/tmp/probe-cache"
    >>> cache_root()
    PosixPath('/tmp/probe-cache')
    >>> del os.environ["PROBE_CACHE"]
    """
    return Path(os.environ.get("PROBE_CACHE") or Path.home() / ".cache" / "probe")


__all__ = ["cache_root"]
