"""The contact-regression file: what ``probe contacts --fit`` writes and ``--regression FILE`` reads, checked.

A JSON object (format ``probe-contact-regression``, version 1)::

    {"format": "probe-contact-regression", "version": 1, "model": "path/or/hub-id", "revision": "…",
     "bias": -3.1, "weight": [[w_00, w_01, …], …],            # [layer head], finite numbers
     "c": 0.15, "structures": ["1aki_A", …], "top_heads": [[layer, head], …], "evaluation": [{…}, …]}

``format``, ``weight`` and ``bias`` are required; the other keys are optional (a file without them reads with
their defaults). :func:`read_regression` checks every key against that schema — its type, its range (``c`` >
0, ``top_heads`` inside the weight table) and that no unknown key is present — and refuses anything else in
one line naming the key (a :class:`~probe.errors.ProbeError`, exit 2 from the CLI): a file fitted by hand or
damaged is never half-read. It also refuses a folder, a file larger than :data:`MAX_BYTES`, text that is not
UTF-8 JSON, and JSON nested deeper than Python's parser can follow (about 1,000 brackets; the format nests 3
levels).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path

import numpy as np
import torch

from probe.errors import ProbeError, first_line

DEFAULT_C = 0.15  # sklearn's C (inverse L1 strength) on standardised channels; our choice (see regression.py)
FORMAT = "probe-contact-regression"
FORMAT_VERSION = 1
MAX_BYTES = 64 * 1024 * 1024  # a 48 × 40 model's regression with its evaluation rows is well under 1 MB
KEYS = ("format", "version", "model", "revision", "bias", "weight", "c", "structures", "top_heads",
        "evaluation")


@dataclass(frozen=True, eq=False)
class ContactRegression:
    """A fitted contact regression (raw APC(sym α) units) and what it was fitted on.

    Attributes
    ----------
    model : str
        The model's name or path.
    weight : numpy.ndarray, shape=(layer, head), float64
        One weight per head's APC(sym α) map.
    bias : float
        The logit's intercept.
    c : float
        The L1 strength it was fitted with (sklearn's C).
    structures : tuple of str
        Ids of the training structures.
    top_heads : tuple of (int, int)
        The top-k baseline's heads, chosen on the same set.
    evaluation : list of dict
        Leave-one-out rows (:func:`probe.proteins.regression.fit_files`).
    revision : str
        The model's revision; "" when not recorded.

    Examples
    --------
    >>> import os, tempfile
    >>> fitted = ContactRegression(model="zoo:esm-random", weight=np.ones((2, 4)), bias=-3.0)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     fitted.save(os.path.join(folder, "regression.json"))
    ...     back = read_regression(os.path.join(folder, "regression.json"))
    >>> weight, bias = back.check_model(probe.load("zoo:esm-random")).as_tuple()  # predict_contacts takes it
    >>> weight.shape, bias
    (torch.Size([2, 4]), -3.0)
    """

    model: str  # the model's name or path
    weight: np.ndarray  # [layer head] float64
    bias: float
    c: float = DEFAULT_C
    structures: tuple[str, ...] = ()  # ids of the training structures
    top_heads: tuple[tuple[int, int], ...] = ()  # (layer, head) of the top-k baseline, chosen on the same set
    evaluation: list[dict] = field(default_factory=list)  # leave-one-out rows (probe.proteins.regression)
    revision: str = ""  # the model's revision (probe.models: commit or weights hash); "" when not recorded

    def as_tuple(self) -> tuple[torch.Tensor, float]:
        """(weight [layer head] float32 tensor, bias): the form
        :func:`probe.proteins.contacts.predict_contacts` takes as ``regression``."""
        return torch.as_tensor(self.weight, dtype=torch.float32), float(self.bias)

    def check_model(self, loaded) -> ContactRegression:
        """Self, when it was fitted for `loaded` (its revision, where both are known) and its shape fits
        (layers × heads); a one-line ProbeError otherwise."""
        if self.revision and loaded.revision not in ("", "unknown") and self.revision != loaded.revision:
            raise ProbeError(f"the contact regression was fitted for {self.model} "
                             f"(revision {self.revision[:12]}), not for {loaded.name} "
                             f"(revision {loaded.revision[:12]}): fit one for this model with --fit")
        if tuple(self.weight.shape) != (loaded.n_layers, loaded.n_heads):
            raise ProbeError(f"the contact regression was fitted for {self.weight.shape[0]} layers × "
                             f"{self.weight.shape[1]} heads ({self.model}) but {loaded.name} has "
                             f"{loaded.n_layers} × {loaded.n_heads}: fit one for this model with --fit")
        return self

    def save(self, path: str | Path) -> None:
        """Write as JSON (atomically: a temporary file renamed)."""
        path = Path(path)
        data = {"format": FORMAT, "version": FORMAT_VERSION, "model": self.model, "revision": self.revision,
                "bias": float(self.bias),
                "weight": np.asarray(self.weight, dtype=np.float64).tolist(), "c": self.c,
                "structures": list(self.structures), "top_heads": [list(pair) for pair in self.top_heads],
                "evaluation": self.evaluation}
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=_json_default), encoding="utf-8")
        tmp.replace(path)


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def read_regression(path: str | Path) -> ContactRegression:
    """A regression written by :meth:`ContactRegression.save` (``probe contacts --fit``), checked against the
    schema of the module docstring.

    Raises
    ------
    ProbeError
        One line naming the problem: a missing file, a folder, a file that is not a regression, or the key
        whose value breaks the schema.

    Examples
    --------
    >>> import json, os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "regression.json")
    ...     with open(path, "w") as file:
    ...         json.dump({"format": "probe-contact-regression", "weight": [[1.0, 2.0]], "bias": -1}, file)
    ...     regression = read_regression(path)
    ...     with open(path, "w") as file:
    ...         json.dump({"format": "probe-contact-regression", "weight": [[1.0, "x"]], "bias": -1}, file)
    ...     read_regression(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    probe.errors.ProbeError: --regression .../regression.json is damaged: "weight" must hold finite numbers
    only (it holds "x"); fit it again with --fit
    >>> regression.weight, regression.bias, regression.c  # c: the default
    (array([[1., 2.]]), -1.0, 0.15)
    """
    file = Path(path).expanduser()
    if file.is_dir():
        raise ProbeError(f"--regression {path} is a folder: give the .json file probe contacts --fit wrote")
    if not file.is_file():
        raise ProbeError(f"--regression {path} does not exist: fit one with probe contacts --fit STRUCTURES")
    if file.stat().st_size > MAX_BYTES:
        raise ProbeError(f"--regression {path} is larger than {MAX_BYTES >> 20} MiB: not a contact "
                         "regression file")
    try:
        data = json.loads(file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProbeError(f"--regression {path} is not a contact regression file "
                         f"({first_line(error)})") from None
    except RecursionError:  # the parser's stack: brackets nested ~1,000 deep; the format nests 3
        raise ProbeError(f"--regression {path} is not a contact regression file (its JSON is nested too "
                         "deeply; the format nests 3 levels)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProbeError(f"--regression {path} is not a contact regression file written by "
                         "probe contacts --fit")
    try:
        return _checked(data)
    except _SchemaError as error:
        raise ProbeError(f"--regression {path} is damaged: {error}; fit it again with --fit") from None


def is_regression(path: str | Path) -> bool:
    """Whether `path` is a valid regression file (so ``--fit`` may overwrite it without ``--force``)."""
    try:
        read_regression(path)
    except ProbeError:
        return False
    return True


class _SchemaError(ValueError):
    """One key of a regression file breaks the schema (the message names it)."""


def _number(value) -> bool:
    """A JSON number (bool is not one, though Python calls it an int)."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))


def _shown(value) -> str:
    """A value as the file spells it, cut to 40 characters."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _checked(data: dict) -> ContactRegression:
    """The regression a schema-valid object stands for; _SchemaError naming the first key that is not."""
    unknown = [key for key in data if key not in KEYS]
    if unknown:
        raise _SchemaError(f"unknown key {_shown(unknown[0])} (a regression file has {', '.join(KEYS)})")
    for key in ("weight", "bias"):
        if key not in data:
            raise _SchemaError(f'it has no "{key}"')
    version = data.get("version", FORMAT_VERSION)
    if not isinstance(version, Integral) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
        raise _SchemaError(f'"version" must be {FORMAT_VERSION} (it is {_shown(version)})')
    for key in ("model", "revision"):
        if not isinstance(data.get(key, ""), str):
            raise _SchemaError(f'"{key}" must be a string (it is {_shown(data[key])})')
    weight = data["weight"]
    if (not isinstance(weight, list) or not weight or not all(isinstance(row, list) and row for row in weight)
            or len({len(row) for row in weight}) != 1):
        raise _SchemaError(f'"weight" must be a [layer, head] table: a list of equally long lists of numbers '
                           f"(it is {_shown(weight)})")
    bad = [value for row in weight for value in row if not _number(value)]
    if bad:
        raise _SchemaError(f'"weight" must hold finite numbers only (it holds {_shown(bad[0])})')
    if not _number(data["bias"]):
        raise _SchemaError(f'"bias" must be a finite number (it is {_shown(data["bias"])})')
    c = data.get("c", DEFAULT_C)
    if not _number(c) or c <= 0:
        raise _SchemaError(f'"c" must be a positive number (it is {_shown(c)})')
    structures = data.get("structures", [])
    if not isinstance(structures, list) or not all(isinstance(name, str) for name in structures):
        raise _SchemaError(f'"structures" must be a list of structure ids (it is {_shown(structures)})')
    layers, heads = len(weight), len(weight[0])
    top_heads = data.get("top_heads", [])
    if not isinstance(top_heads, list) or not all(_head_pair(pair, layers, heads) for pair in top_heads):
        raise _SchemaError(f'"top_heads" must be a list of [layer, head] pairs inside the {layers} × {heads} '
                           f"weights (it is {_shown(top_heads)})")
    evaluation = data.get("evaluation", [])
    if not isinstance(evaluation, list) or not all(_evaluation_row(row) for row in evaluation):
        raise _SchemaError('"evaluation" must be a list of rows: objects of strings and numbers (or null)')
    return ContactRegression(model=data.get("model", ""), weight=np.asarray(weight, dtype=np.float64),
                             bias=float(data["bias"]), c=float(c), structures=tuple(structures),
                             top_heads=tuple((int(layer), int(head)) for layer, head in top_heads),
                             evaluation=list(evaluation), revision=data.get("revision", ""))


def _head_pair(pair, layers: int, heads: int) -> bool:
    return (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(value, Integral) and not isinstance(value, bool) for value in pair)
            and 0 <= pair[0] < layers and 0 <= pair[1] < heads)


def _evaluation_row(row) -> bool:
    # NaN precisions are written as NaN by json.dumps (allow_nan): a float that is not finite is a value here
    return isinstance(row, dict) and all(
        isinstance(value, str | Real) or value is None for value in row.values())


__all__ = ["DEFAULT_C", "FORMAT", "FORMAT_VERSION", "ContactRegression", "is_regression", "read_regression"]
