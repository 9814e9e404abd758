"""probe — flash-compatible attention capture, head labelling and ESM contact analysis.

Nothing heavy happens at import: torch and transformers are imported by the modules that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "ProbeError", "head_name", "parse_head_name"]

from probe.errors import ProbeError
from probe.heads import head_name, parse_head_name
