"""Edits of an intervention site's tensor (:class:`Edit`), applied by
:func:`probe.engine.interventions.intervene`.

An edit acts on the site's tensor in the site's shape (``[batch query head width]`` for a per-head site,
``[batch query width]`` otherwise): replace it, add to it, zero it (multiplied by 0, as the engine's head
ablation) or put a function of it in its place, at every entry or only at chosen heads, query positions, or a
boolean ``where`` mask.

Examples
--------
>>> block = torch.ones(1, 3, 2, 4)  # [batch query head width]
>>> Edit.zero(heads=[1], positions=[0]).edited(block, per_head=True)[0, :, :, 0]
tensor([[1., 0.],
        [1., 1.],
        [1., 1.]])
>>> Edit.add(torch.full((4,), 2.0), where=torch.tensor([[[True, False]]])).edited(block, True)[0, 0, :, 0]
tensor([3., 1.])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from probe.errors import ProbeError

OPS = ("replace", "add", "zero", "apply")


@dataclass(frozen=True, eq=False)
class Edit:
    """One change of a site's tensor (build it with :meth:`zero`, :meth:`replace`, :meth:`add` or
    :meth:`apply`).

    Attributes
    ----------
    op : {"replace", "add", "zero", "apply"}
        ``replace``: the tensor becomes `value` (broadcast to the site's shape); ``add``: tensor + `value`;
        ``zero``: tensor × 0 (as the engine's ablation); ``apply``: ``value(tensor)`` (None: unchanged).
    value : torch.Tensor or callable or None
    heads, positions : tuple of int or None
        Only these heads (per-head sites) / query positions of the forward; None: all.
    where : torch.Tensor or None
        Bool, broadcastable to ``[batch query head]`` (per-head sites) or ``[batch query]``: only there.

    Examples
    --------
    >>> from probe.engine.interventions import intervene
    >>> with intervene(loaded.model, edit={"L0.head_out": Edit.zero(heads=[1])}), torch.no_grad():
    ...     ablated = loaded.model(**inputs).logits  # zoo:induction without its previous-token head
    >>> with torch.no_grad():
    ...     plain = loaded.model(**inputs).logits
    >>> int(plain[0, -2].argmax()) == int(inputs["input_ids"][0, -1]), int(ablated[0, -2].argmax()) == int(
    ...     inputs["input_ids"][0, -1])  # the induction circuit predicts the repeat; without L0H1 it does not
    (True, False)
    """

    op: str
    value: object = None
    heads: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None
    where: torch.Tensor | None = None

    @classmethod
    def zero(cls, heads=None, positions=None, where=None) -> Edit:
        """The tensor × 0 (at `heads`, `positions`, `where`)."""
        return cls("zero", None, _ints(heads), _ints(positions), where)

    @classmethod
    def replace(cls, value: torch.Tensor, heads=None, positions=None, where=None) -> Edit:
        """The tensor replaced by `value` (broadcast to the site's shape)."""
        return cls("replace", value, _ints(heads), _ints(positions), where)

    @classmethod
    def add(cls, value: torch.Tensor, heads=None, positions=None, where=None) -> Edit:
        """`value` added to the tensor."""
        return cls("add", value, _ints(heads), _ints(positions), where)

    @classmethod
    def apply(cls, fn: Callable[[torch.Tensor], torch.Tensor | None], heads=None, positions=None,
              where=None) -> Edit:
        """``fn(tensor)`` (the site's shape; None leaves it unchanged) in place of the tensor."""
        return cls("apply", fn, _ints(heads), _ints(positions), where)

    def selection(self, shape: torch.Size, per_head: bool, device) -> torch.Tensor | None:
        """Bool ``[batch|1 query|1 head|1]`` (per-head) or ``[batch|1 query|1]`` of the edited entries of a
        tensor of `shape` (``[batch query head width]`` / ``[batch query width]``); None: all of them."""
        if self.heads is None and self.positions is None:
            return None if self.where is None else self.where.to(device)
        axes = shape[:-1]  # [batch query head] or [batch query]
        chosen = torch.ones((1,) * len(axes), dtype=torch.bool, device=device)
        if self.positions is not None:
            if self.positions and max(self.positions) >= axes[1]:
                raise ProbeError(f"edit position {max(self.positions)} is outside this forward's "
                                 f"{axes[1]} query positions")
            rows = torch.zeros(axes[1], dtype=torch.bool, device=device)
            rows[list(self.positions)] = True
            chosen = chosen & rows.view(1, -1, *(1,) * (len(axes) - 2))
        if self.heads is not None:
            heads = torch.zeros(axes[2], dtype=torch.bool, device=device)
            heads[list(self.heads)] = True
            chosen = chosen & heads.view(1, 1, -1)
        if self.where is not None:
            chosen = chosen & self.where.to(device)
        return chosen

    def new(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The edited value of the selected entries (broadcastable to `tensor`); None: no change."""
        if self.op == "zero":
            return tensor * 0
        if self.op == "apply":
            return self.value(tensor)
        value = self.value.to(tensor.device, tensor.dtype)
        return value if self.op == "replace" else tensor + value

    def edited(self, tensor: torch.Tensor, per_head: bool) -> torch.Tensor:
        """`tensor` (``[batch query (head) width]``) with this edit applied."""
        chosen = self.selection(tensor.shape, per_head, tensor.device)
        if self.op == "zero":  # multiplied by the kept mask, as the engine's ablation
            return tensor * 0 if chosen is None else tensor * (~chosen)[..., None].to(tensor.dtype)
        new = self.new(tensor)
        if new is None:
            return tensor
        if chosen is None:
            return new.expand(tensor.shape).clone() if new.shape != tensor.shape else new
        return torch.where(chosen[..., None], new, tensor)


def _ints(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(value) for value in values)


__all__ = ["Edit", "OPS"]
