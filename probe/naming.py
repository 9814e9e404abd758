"""One formatter and parser for head names: (layer, head) in code, "L{layer}H{head}" in files, CLI and app;
and the one name a model is shown by (:func:`display_name`: pages, reports, exported files).

Encoder–decoder models have three stacks of attention layers; their heads are written with the stack first:
``enc.L3H2`` (encoder self-attention), ``dec.L1H0`` (decoder self-attention), ``cross.L1H0``
(cross-attention). Single-stack models keep the plain ``L3H2``.
"""

from __future__ import annotations

import re
from pathlib import Path

from probe.errors import ProbeError
from probe.specs import PACKAGED_NAMES, model_id

_HEAD_NAME = re.compile(r"^L(\d+)H(\d+)$")
_STACK_HEAD_NAME = re.compile(r"^(?:(enc|dec|cross)\.)?L(\d+)H(\d+)$")


def head_name(layer: int, head: int, stack: str | None = None) -> str:
    """(3, 7) -> "L3H7"; with a stack (encoder–decoder models), (3, 7, "enc") -> "enc.L3H7".

    Parameters
    ----------
    layer, head : int
        0-based.
    stack : {"enc", "dec", "cross"}, optional
        The stack of an encoder–decoder model's head.

    Returns
    -------
    str
    """
    return f"L{layer}H{head}" if not stack else f"{stack}.L{layer}H{head}"


def display_name(spec: str) -> str:
    """The one name a page, a report or an exported file shows for a model: a package-shipped model by its
    name (``all-MiniLM-L6-v2``, also when given by its install path), a local directory by its folder, others
    as given — never a path of this machine.

    >>> display_name("sentence-transformers/all-MiniLM-L6-v2"), display_name("/tmp/runs/induction")
    ('all-MiniLM-L6-v2', 'induction')
    """
    spec = model_id(spec)
    if spec in PACKAGED_NAMES:
        return PACKAGED_NAMES[spec]
    path = Path(spec)
    return path.name if path.is_absolute() or spec.startswith(".") else spec


def fixed(value: float, digits: int = 1) -> str:
    """`value` with `digits` decimals, never a negative zero: what rounds to zero is written ``0.0`` (a z of
    −0.04 is no evidence of a sign). The one formatter of the z values the CLI, the report and the app print.

    >>> fixed(-0.04), fixed(-0.0), fixed(2.345, 2), fixed(float("nan"))
    ('0.0', '0.0', '2.35', 'nan')
    """
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def file_stem(text: str) -> str:
    """`text` as a safe file-name part: "zoo:induction L1H3" -> "zoo_induction_L1H3"."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "probe"


def parse_stack_head_name(name: str) -> tuple[str | None, int, int]:
    """"enc.L3H7" -> ("enc", 3, 7), "L3H7" -> (None, 3, 7); raises ProbeError on anything else."""
    match = _STACK_HEAD_NAME.match(name.strip())
    if not match:
        raise ProbeError(f"bad head name {name!r}: write it as L<layer>H<head> (e.g. L3H7), or with the "
                         "stack of an encoder-decoder model: enc.L3H7, dec.L1H0, cross.L1H0")
    return match.group(1), int(match.group(2)), int(match.group(3))


def parse_head_name(name: str) -> tuple[int, int]:
    """"L3H7" -> (3, 7).

    Parameters
    ----------
    name : str
        A head name, ``L{layer}H{head}``.

    Returns
    -------
    tuple of int
        (layer, head).

    Raises
    ------
    ProbeError
        On anything else.
    """
    match = _HEAD_NAME.match(name.strip())
    if not match:
        raise ProbeError(f"bad head name {name!r}: write it as L<layer>H<head>, e.g. L3H7")
    return int(match.group(1)), int(match.group(2))


def parse_index_list(text: str | None, upper: int, what: str) -> list[int]:
    """"0,3,5-7" -> [0, 3, 5, 6, 7], each checked against range(upper). None (the flag left out) or "all" ->
    all of range(upper); an empty value ("", " ") is refused like "," is, never read as all.

    A range is checked before it is expanded, so "0-999999999999" is an error, never a huge list.
    """
    if text is None or text.strip() == "all":
        return list(range(upper))
    if not text.strip():
        raise ProbeError(f"--{what} is empty: give comma-separated indices such as 0,3,5-7, or all (or leave "
                         "the flag out)")
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            first, last = (int(x) for x in part.split("-", 1)) if "-" in part else (int(part), int(part))
        except ValueError:
            raise ProbeError(
                f"bad --{what} value {part!r}: give comma-separated indices such as 0,3,5-7") from None
        if first > last:
            raise ProbeError(f"--{what} range {part} is empty (it runs backwards): write it low-high, e.g. "
                             f"{last}-{first}")
        for index in (first, last):
            if not 0 <= index < upper:
                raise ProbeError(f"--{what} index {index} is out of range: this model has {what} "
                                 f"0..{upper - 1}")
        indices.extend(range(first, last + 1))
    return sorted(dict.fromkeys(indices))
