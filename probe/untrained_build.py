"""Building an untrained twin's weights one device-map module at a time (what :mod:`probe.untrained` calls).

A twin is the model's class built on the meta device (no memory, no random draws), then initialised by the
class's own ``_init_weights`` in exactly the order of transformers' ``PreTrainedModel.initialize_weights``
(children before their parent; a sub-model's own initialiser inside it). Each module of the device map
(``{"": "cpu"}`` for a model on one device) is materialised on the CPU when the walk first enters it, filled
with NaN (integers: their smallest value), initialised, checked and placed where the model's module is (kept
on the CPU, moved to its accelerator, or written to the twin's offload folder and returned to the meta
device) before the walk goes on. The random draws are the same whatever the placement, so a device-mapped
twin equals the in-memory twin of the same seed, value for value, while holding one module at a time beyond
what stays resident.

Two checks keep that promise honest instead of guessing:

* while a module is initialised, no operation may read a tensor that is still on the meta device (an
  initialiser that reads another module's weights would see nothing there: :class:`ProbeError`);
* after a module is initialised, no parameter may still hold the NaN it was filled with (the class's
  initialiser does not set it: :class:`ProbeError`). Buffers it leaves unset (position ids, rotary
  frequencies of classes that compute them in ``__init__``) are copied from the model: buffers are
  functions of the configuration, not learnt weights.

Tied weights (``lm_head`` sharing the embedding) stay one tensor while they are built, as in the model; the
modules that share a tensor are placed together once all of them are initialised.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from probe.errors import ProbeError


class _NoUnbuilt(TorchDispatchMode):
    """Refuses any operation that reads a tensor on the meta device (a weight not built yet, or placed)."""

    def __init__(self, module: str):
        super().__init__()
        self.module = module

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(leaf, torch.Tensor) and leaf.is_meta for leaf in tree_leaves((args, kwargs))):
            raise ProbeError(f"the initialiser of {self.module or 'the model'} reads weights of another "
                             f"module ({func}): its untrained twin cannot be built one module at a time")
        return func(*args, **kwargs)


def _post_order(module: nn.Module, fn, prefix: str):
    """(name, module, initialiser) in the order of transformers' ``smart_apply``: children first, and a
    sub-model (a PreTrainedModel inside the model) with its own ``_initialize_weights``."""
    from transformers import PreTrainedModel

    for name, child in module.named_children():
        child_fn = child._initialize_weights if isinstance(child, PreTrainedModel) else fn
        yield from _post_order(child, child_fn, f"{prefix}.{name}" if prefix else name)
    yield prefix, module, fn


def _entry_of(name: str, entries: list[str]) -> str | None:
    """The device-map module that holds module `name` (longest prefix), or None for an ancestor of them."""
    for entry in entries:
        if entry == "" or name == entry or name.startswith(entry + "."):
            return entry
    return None


def _materialise(module: nn.Module, made: dict[int, torch.Tensor]) -> None:
    """Every meta parameter and buffer of `module` as a CPU tensor filled with NaN (floating) or a sentinel;
    a tensor shared with another module (tied weights) becomes one tensor for all of them (`made`)."""
    for sub in module.modules():
        for key, tensor in list(sub.named_parameters(recurse=False)) + list(sub.named_buffers(recurse=False)):
            if tensor is None or not tensor.is_meta:
                continue
            built = made.get(id(tensor))
            if built is None:
                empty = torch.empty_like(tensor, device="cpu")
                empty.fill_(_unset_value(empty.dtype))
                parameter = isinstance(tensor, nn.Parameter)
                built = nn.Parameter(empty, tensor.requires_grad) if parameter else empty
                made[id(tensor)] = built
            setattr(sub, key, built)


def _unset_value(dtype: torch.dtype):
    """What a built tensor holds until the initialiser sets it: NaN, or the smallest integer (False)."""
    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    return False if dtype == torch.bool else torch.iinfo(dtype).min


def _is_unset(tensor: torch.Tensor) -> bool:
    """Whether `tensor` still holds :func:`_unset_value` somewhere (booleans cannot tell: never)."""
    if tensor.dtype == torch.bool or tensor.numel() == 0:
        return False
    if tensor.is_floating_point() or tensor.is_complex():
        return bool(torch.isnan(tensor).any())
    return bool((tensor == torch.iinfo(tensor.dtype).min).any())


def _unset(module: nn.Module, prefix: str, source: nn.Module) -> None:
    """Refuse a parameter the initialiser left unset; copy a buffer it left unset from the model."""
    for name, parameter in module.named_parameters(prefix=prefix, remove_duplicate=False):
        if _is_unset(parameter):
            raise ProbeError(f"{type(source).__name__}'s initialiser sets no value for {name}: its untrained "
                             "twin would not be the class's own")
    for sub_name, sub in module.named_modules(prefix=prefix):
        for key, buffer in sub.named_buffers(recurse=False):
            if _is_unset(buffer):
                original = source.get_buffer(f"{sub_name}.{key}" if sub_name else key)
                setattr(sub, key, original.detach().to("cpu").clone())


def _place(module: nn.Module, prefix: str, where, folder: Path | None, index: dict | None) -> None:
    """Put a built device-map module where the model's is: the CPU as it is, an accelerator, or disk (each
    parameter written to the twin's offload folder, then back on the meta device for accelerate's hooks)."""
    if where == "disk":
        from accelerate.utils import offload_weight

        for name, parameter in module.named_parameters(prefix=prefix, remove_duplicate=False):
            offload_weight(parameter.detach(), name, str(folder), index=index)
        for sub in module.modules():
            for key, parameter in list(sub.named_parameters(recurse=False)):
                setattr(sub, key, nn.Parameter(parameter.detach().to("meta"), parameter.requires_grad))
    elif str(where) != "cpu":
        module.to(torch.device(f"cuda:{where}" if isinstance(where, int) else where))


def _groups(model: nn.Module, entries: list[str]) -> dict[str, frozenset[str]]:
    """Device-map modules that share a tensor (tied weights) are placed together: entry -> its group."""
    owners: dict[int, set[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        entry = _entry_of(name, entries)
        for tensor in list(module.parameters(recurse=False)):
            owners.setdefault(id(tensor), set()).add(entry)
    groups = {entry: {entry} for entry in entries}
    for shared in owners.values():
        merged = set().union(*(groups[entry] for entry in shared if entry is not None))
        for entry in merged:
            groups[entry] = merged
    return {entry: frozenset(group) for entry, group in groups.items()}


def initialise(model: nn.Module, device_map: dict, folder: Path | None, source: nn.Module) -> dict | None:
    """Initialise a meta-built `model` in place, one `device_map` module at a time (see the module
    docstring); returns accelerate's offload index of the modules written to `folder` (None without disk).

    Parameters
    ----------
    model : torch.nn.Module
        The twin's module, built on the meta device (``_from_config`` under ``torch.device("meta")``).
    device_map : dict
        Module name -> ``"cpu"``, an accelerator or ``"disk"`` (the model's ``hf_device_map``), or
        ``{"": "cpu"}`` for one device.
    folder : pathlib.Path or None
        Where modules on disk are written (needed when the map has ``"disk"``).
    source : torch.nn.Module
        The model the twin copies: unset buffers are read from it.

    Returns
    -------
    dict or None
        The offload index for ``accelerate.dispatch_model``.

    Examples
    --------
    >>> import torch, transformers
    >>> from probe.untrained_build import initialise
    >>> config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=11, n_positions=8)
    >>> with torch.device("meta"):
    ...     twin = transformers.GPT2LMHeadModel._from_config(config)
    >>> _ = torch.manual_seed(0)
    >>> initialise(twin, {"": "cpu"}, None, twin) is None, twin.lm_head.weight is twin.transformer.wte.weight
    (True, True)
    >>> bool(torch.isnan(twin.transformer.h[0].attn.c_attn.weight).any())
    False
    """
    entries = sorted(device_map, key=len, reverse=True)  # the longest name first: the innermost module
    modules = dict(model.named_modules())
    groups = _groups(model, entries)
    index: dict | None = {} if "disk" in device_map.values() else None
    made: dict[int, torch.Tensor] = {}
    built: set[str] = set()
    done: set[str] = set()
    is_custom = model.is_custom_code()
    for name, module, initialiser in _post_order(model, model._initialize_weights, ""):
        entry = _entry_of(name, entries)
        if entry is not None and entry not in built:
            _materialise(modules[entry], made)
            built.add(entry)
        with torch.no_grad(), _NoUnbuilt(name):
            initialiser(module, is_custom)
        if entry is not None and name == entry:  # the walk leaves the entry: all of it is initialised
            done.add(entry)
            if groups[entry] <= done:
                for member in sorted(groups[entry]):
                    _unset(modules[member], member, source)
                    _place(modules[member], member, device_map[member], folder, index)
    if index:
        from accelerate.utils import save_offload_index

        save_offload_index(index, str(folder))
    return index


def offload_root(source: nn.Module, seed: int) -> Path:
    """A new folder for one twin's weights on disk: inside the model's own offload folder (found through
    accelerate's hooks), else the system's temporary folder; the caller removes it."""
    found = None
    for module in source.modules():
        weights = getattr(getattr(module, "_hf_hook", None), "weights_map", None)
        found = getattr(getattr(weights, "dataset", None), "save_folder", None)
        if found:
            break
    return Path(tempfile.mkdtemp(prefix=f"untrained-twin-{seed}-", dir=found or None))


__all__ = ["initialise", "offload_root"]
