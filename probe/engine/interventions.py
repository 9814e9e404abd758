"""One intervention layer: watch or edit any named site of a running model (:mod:`probe.engine.sites`).

Every read or change of a running model's tensors in probe — record a head's output, patch a path, zero a
query, take a gradient — goes through :func:`intervene`: one forward hook per module and direction where the
asked sites sit, removed when the block ends, also on an exception (:func:`hooked`, the package's one hook
primitive). The capture path (the attention function registered with transformers) is apart. Longer than 450
lines because that primitive, with its guard against torch's two-step hook registration seen from other
threads (:func:`unregistered_skipped`), must sit in the one file that registers hooks (a test pins it).

Two ways in:

* **watch**: the site's tensor after this forward's edits, saved (``run.saved[site]``, detached; the last
  forward's) or handed to a callback ``fn(site, tensor)`` each forward; with ``grad``, its gradient after
  ``backward()`` (``run.grads[site]``: ∂/∂ the tensor as the model used it; ``attn_in``, ``mlp_in`` and the
  ``*_in`` sites feed only their component, so their gradient flows through it alone);
* **edit** (:class:`Edit`): replace, add, zero or a function of the tensor, optionally only at some heads
  (per-head sites), positions (query axis) or a boolean ``where`` mask (``[batch query head]`` or ``[batch
  query]``, broadcastable: e.g. different heads per batch row).

A per-head input edit (``L{L}.q_in`` / ``k_in`` / ``v_in``) changes only the edited heads' columns of the
projection's output: they become ``proj(norm(x′))``'s columns of that head, where x′ is the edited input and
``norm`` the block's pre-attention norm (none in a post-norm block); the other heads, and the tensor the other
projections read, are untouched. A gradient there is ∂/∂ (head h's own copy of the input), computed after
``backward()`` from the projection output's gradient through that head's weights and the norm (exact: q_h
depends on the input only through them; :mod:`~probe.engine.head_inputs`: one norm VJP per shared input,
``run.input_gradients`` stacks a layer's q, k and v heads).

Examples
--------
>>> from probe.zoo.tiny import build_tiny
>>> model, _ = build_tiny("gpt2")
>>> ids = torch.tensor([[1, 5, 9, 5, 9]])
>>> with intervene(model, watch=["L1.head_out", "logits"]) as run, torch.no_grad():
...     plain = model(input_ids=ids).logits
>>> tuple(run.saved["L1.head_out"].shape), torch.equal(run.saved["logits"], plain)  # [batch query head d_v]
((1, 5, 4, 8), True)
>>> with intervene(model, edit={"L1.head_out": Edit.zero(heads=[2])}) as run, torch.no_grad():
...     ablated = model(input_ids=ids).logits  # head L1H2 zeroed at every position
>>> bool((ablated - plain).abs().max() > 0)
True
>>> with intervene(model, watch=["L0.attn_out"], grad=True) as run:
...     model(input_ids=ids).logits[0, -1, 3].backward()
>>> tuple(run.grads["L0.attn_out"].shape)
(1, 5, 32)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

from probe.engine.edits import OPS, Edit
from probe.engine.head_inputs import input_gradients, out_width
from probe.engine.sites import MODEL_SITES, Site, SiteMap, site_map
from probe.errors import ProbeError

INPUTS = ("q_in", "k_in", "v_in")


class Grads(Mapping):
    """``run.grads[site]``: the gradient at a watched site after ``backward()`` (its site's shape)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.run.gradient(name)

    def __iter__(self):
        return iter(self.run.grad_sites)

    def __len__(self) -> int:
        return len(self.run.grad_sites)


class Run:
    """What :func:`intervene` keeps: ``saved`` (site -> the last forward's tensor, detached) and ``grads``.
    It refers to nothing that refers back to it: freed as soon as the caller drops it."""

    def __init__(self, found: SiteMap, grad_sites: Sequence[str]) -> None:
        self.sites = found
        self.saved: dict[str, torch.Tensor] = {}
        self.grad_sites = tuple(grad_sites)
        self.kept: dict[str, torch.Tensor] = {}  # site -> the tensor whose .grad is read (retain_grad)
        self.inputs: dict[str, torch.Tensor] = {}  # *_in site -> the per-head input used [batch query head d]
        self.normed: dict[tuple, tuple] = {}  # a replacement input's norm, kept for the run (no autograd)

    @property
    def grads(self) -> Grads:
        """site -> its gradient (made on each read: a Grads kept on the Run would be a reference cycle)."""
        return Grads(self)

    def gradient(self, name: str) -> torch.Tensor:
        """The gradient at `name` (a site watched with ``grad``) of the last ``backward()``."""
        grad, site = self.column_gradient(name), self.sites.site(name)
        if site.kind in INPUTS:
            return self.input_gradients([name]).permute(1, 2, 0, 3)  # [batch query head d_model]
        if site.heads and site.kind not in ("q", "k", "v"):
            grad = grad.unflatten(-1, (site.heads, site.width))
        return grad

    def input_gradients(self, names: Sequence[str]) -> torch.Tensor:
        """The gradients at per-head input sites `names` (``L{l}.q_in`` …, watched with ``grad``), every
        site's heads stacked: `[Σ head batch query d_model]` (:func:`~.head_inputs.input_gradients`: the
        norm's VJP taken once per input the sites share, e.g. a layer's q, k and v)."""
        sites = [self.sites.site(name) for name in names]
        if any(site.kind not in INPUTS for site in sites):
            raise ProbeError(f"input_gradients is for {' / '.join(INPUTS)} sites: use run.grads[name]")
        grads = [self.column_gradient(name) for name in names]  # [batch query head width] each
        return input_gradients(sites, [self.inputs[name] for name in names], grads)

    def column_gradient(self, name: str) -> torch.Tensor:
        """The kept tensor's gradient at `name` (q / k / v and their inputs: their heads' columns of the
        projection's, `[batch query head width]`), refused in one line where none was kept or reached it."""
        if name not in self.grad_sites:
            raise ProbeError(f"site {name} was not watched with grad=True: no gradient kept")
        kept, site = self.kept.get(name), self.sites.site(name)
        grad = None if kept is None else kept.grad
        if grad is None:
            raise ProbeError(f"no gradient reached {name}: run backward() on an output of the forward made "
                             "inside intervene(...)")
        if site.kind in ("q", "k", "v", *INPUTS):
            grad = grad[..., site.columns].unflatten(-1, (site.heads, out_width(site)))
        return grad


def _fresh(tensor: torch.Tensor) -> torch.Tensor:
    """A new autograd node of `tensor`'s values whose gradient is kept (a leaf where nothing needs one)."""
    if not torch.is_grad_enabled():
        raise ProbeError("grad=True needs a forward with gradients enabled (not under torch.no_grad())")
    fresh = tensor.view_as(tensor) if tensor.requires_grad else tensor.detach().requires_grad_(True)
    fresh.retain_grad()
    return fresh


class _Hooks:
    """The sites of one module and direction, processed in site order by one hook."""

    def __init__(self, run: Run, sites: list[Site], edits: dict[str, list[Edit]], watch: dict, grads: set,
                 owner: int | None, stash: nn.Module | None = None) -> None:
        self.run, self.sites, self.edits, self.watch, self.grads = run, sites, edits, watch, grads
        self.owner, self.stash = owner, stash
        self.stashed: dict[int, torch.Tensor] = {}  # id(norm) -> its input (shared with the projection hook)

    def mine(self) -> bool:
        return self.owner is None or threading.get_ident() == self.owner

    def site_tensor(self, site: Site, tensor: torch.Tensor) -> torch.Tensor:
        """Edit, keep and watch one whole-tensor site (`tensor`: as the model has it)."""
        shaped = edited = tensor.unflatten(-1, (site.heads, site.width)) if site.heads else tensor
        for edit in self.edits.get(site.name, ()):
            edited = edit.edited(edited, bool(site.heads))
        if edited is not shaped:
            tensor, shaped = edited.flatten(-2) if site.heads else edited, edited
        if site.name in self.grads:
            tensor = self.run.kept[site.name] = _fresh(tensor)
            shaped = tensor.unflatten(-1, (site.heads, site.width)) if site.heads else tensor
        self.observe(site, shaped)
        return tensor

    def observe(self, site: Site, value: torch.Tensor) -> None:
        if site.name in self.watch:
            callback = self.watch[site.name]
            if callback is None:
                self.run.saved[site.name] = value.detach()
            else:
                callback(site.name, value)

    def before(self, module: nn.Module, args: tuple, kwargs: dict):
        if not self.mine():
            return None
        from_args = bool(args)
        tensor = args[0] if from_args else kwargs.get("hidden_states")
        if not isinstance(tensor, torch.Tensor):
            raise ProbeError(f"{type(module).__name__} was called without a hidden-states tensor: its sites "
                             "cannot be read")
        original = tensor
        for site in self.sites:
            if site.kind == "final_norm.scale":
                self.observe(site, _scale(site.norm, tensor))
            else:
                tensor = self.site_tensor(site, tensor)
        if self.stash is not None:
            self.stashed[id(module)] = tensor
        if tensor is original:
            return None
        return ((tensor, *args[1:]), kwargs) if from_args else (args, {**kwargs, "hidden_states": tensor})

    def after(self, module: nn.Module, args: tuple, output):
        if not self.mine():
            return None
        tensor = output[0] if isinstance(output, tuple) else output
        original = tensor
        projection = [site for site in self.sites if site.kind in ("q", "k", "v", *INPUTS)]
        if projection:
            tensor = self.projected(module, args, tensor, projection)
        for site in self.sites:
            if site not in projection:
                tensor = self.site_tensor(site, tensor)
        if tensor is original:
            return None
        return (tensor, *output[1:]) if isinstance(output, tuple) else tensor

    def projected(self, module: nn.Module, args: tuple, output: torch.Tensor, sites: list[Site]):
        """q / k / v and their inputs on one projection module's output `[batch query out]`."""
        cache: dict[int, torch.Tensor] = {}
        for site in sites:  # inputs first (site order), then the outputs themselves
            if site.kind not in INPUTS or not (self.edits.get(site.name) or site.name in self.watch
                                                or site.name in self.grads):
                continue
            shared = self.stashed.get(id(site.source)) if site.source is not None else args[0]
            output = self.input_site(module, site, shared, output, cache)
        if any(site.name in self.grads for site in sites):
            output = _fresh(output)
            for site in sites:
                if site.name in self.grads:
                    self.run.kept[site.name] = output
        for site in sites:
            if site.kind in INPUTS:
                continue
            block = output[..., site.columns].unflatten(-1, (site.heads, site.width))  # [batch query head w]
            edited = block
            for edit in self.edits.get(site.name, ()):
                edited = edit.edited(edited, True)
            if edited is not block:
                output = _splice(output, site.columns, edited)
            self.observe(site, edited)
        return output

    def input_site(self, module: nn.Module, site: Site, shared: torch.Tensor | None, output: torch.Tensor,
                   cache: dict) -> torch.Tensor:
        """Edit / watch a per-head input site: the edited heads' columns recomputed from their new input
        (`shared`: the input every head reads `[batch query d_model]`; None where only replacements come)."""
        shape = (*output.shape[:-1], site.heads, site.width)  # [batch query head d_model]
        used = shared[:, :, None, :] if shared is not None else None  # [batch query 1 d_model] while shared
        for edit in self.edits.get(site.name, ()):
            seen = used.expand(shape) if used is not None and edit.op == "apply" else used  # fn: per head
            new = edit.new(seen if seen is not None else output)  # [batch|1 query|1 head|1 d_model]
            if new is None:
                continue
            chosen = edit.selection(torch.Size(shape), True, output.device)  # [batch|1 query|1 head|1]
            new = new.expand(*shape[:2], new.shape[2], shape[3])  # head 1: one input for every head
            normed = self.run.normed if edit.op == "replace" and not torch.is_grad_enabled() else None
            columns = self.columns_of(module, site, new, cache, normed)  # [batch query head|1 width]
            block = output[..., site.columns].unflatten(-1, (site.heads, out_width(site)))
            merged = columns if chosen is None else torch.where(chosen[..., None], columns, block)
            output = _splice(output, site.columns, merged.expand(block.shape))
            if used is not None or chosen is None:
                used = new if chosen is None else torch.where(chosen[..., None], new, used)
        if used is not None:
            used = used.expand(shape)
            self.run.inputs[site.name] = used.detach()
            self.observe(site, used)
        return output

    @staticmethod
    def columns_of(module: nn.Module, site: Site, new: torch.Tensor, cache: dict,
                   normed: dict | None = None) -> torch.Tensor:
        """``proj(norm(new[:, :, h]))``'s columns of head h `[batch query head width]` (one forward of the
        projection when `new` is one input for every head; kept per input tensor across the module's
        sites; `normed`: the run's kept norms of replacement inputs, shared by the q / k / v modules of a
        layer while the input and the norm's weights are unchanged, outside autograd)."""
        heads, width = site.heads, out_width(site)

        def norm(inputs: torch.Tensor) -> torch.Tensor:
            if site.norm is None:
                return inputs
            key = None if normed is None else _identity(site.norm, inputs)
            if key is None:
                return site.norm.forward(inputs)
            if key not in normed:  # the input is kept with it, so its memory is not reused meanwhile
                normed[key] = (inputs, site.norm.forward(inputs))
            return normed[key][1]

        def forward(inputs: torch.Tensor) -> torch.Tensor:  # the same memory and layout: the same input
            key = (inputs.data_ptr(), inputs.shape, inputs.stride(), inputs.dtype)
            if key not in cache:  # the input is kept with it, so its memory is not reused meanwhile
                cache[key] = (inputs, module.forward(norm(inputs)))
            return cache[key][1][..., site.columns].unflatten(-1, (heads, width))  # [batch query head width]
        if new.shape[2] == 1:
            return forward(new[:, :, 0])
        return torch.stack([forward(new[:, :, head])[:, :, head] for head in range(heads)], 2)


def _identity(norm: nn.Module, inputs: torch.Tensor) -> tuple | None:
    """What tells `norm(inputs)` apart: the norm, the input's memory, layout and in-place version, the
    norm's parameters' versions; None where a version is not tracked (inference tensors)."""
    try:
        return (id(norm), inputs.data_ptr(), inputs.shape, inputs.stride(), inputs.dtype, inputs._version,
                tuple(parameter._version for parameter in norm._parameters.values() if parameter is not None))
    except RuntimeError:
        return None


def _splice(output: torch.Tensor, columns: slice, block: torch.Tensor) -> torch.Tensor:
    """`output` `[batch query out]` with `columns` replaced by `block` `[batch query head width]`."""
    pieces = [piece for piece in (output[..., :columns.start], block.flatten(-2), output[..., columns.stop:])
              if piece.shape[-1]]
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, -1)  # a whole (separate) projection: no copy


def _scale(norm: nn.Module, tensor: torch.Tensor) -> torch.Tensor:
    """The final norm's divisor `[batch query 1]` float64 at its input `tensor`."""
    tensor = tensor.detach().double()
    if isinstance(norm, nn.LayerNorm):
        return tensor.var(-1, unbiased=False, keepdim=True).add(norm.eps).sqrt()
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    return tensor.pow(2).mean(-1, keepdim=True).add(eps).sqrt()


def _plan(found: SiteMap, watch, edit, grad):
    """(watch: site -> callback or None, edits: site -> [Edit], grads: set of sites), checked."""
    watched = dict(watch) if isinstance(watch, Mapping) else {name: None for name in watch}
    grads = set(watched) if grad is True else set(grad or ())
    watched.update({name: None for name in grads if name not in watched})
    edits = {name: list(value) if isinstance(value, (list, tuple)) else [value]
             for name, value in (edit or {}).items()}
    named = {name: found.site(name) for name in [*watched, *edits]}  # an unknown name refused here
    if any(named[name].kind == "final_norm.scale" for name in grads):
        raise ProbeError("final_norm.scale is read from the forward, not part of it: no gradient there")
    for name, items in edits.items():
        site = found.site(name)
        if site.kind == "final_norm.scale":
            raise ProbeError("final_norm.scale is watch only: edit final_norm or resid_final instead")
        for item in items:
            if not isinstance(item, Edit) or item.op not in OPS:
                raise ProbeError(f"edit of {name} is {item!r}: give an Edit (Edit.zero / replace / add / "
                                 "apply)")
            if item.heads is not None and not site.heads:
                raise ProbeError(f"site {name} has no head axis: heads= is for per-head sites")
            bad = [head for head in item.heads or () if not 0 <= head < (site.heads or 0)]
            if bad:
                raise ProbeError(f"head {bad[0]} is out of range at {name}: it has heads 0..{site.heads - 1}")
    return watched, edits, grads


@contextlib.contextmanager
def intervene(model: nn.Module, watch: Iterable[str] | Mapping[str, Callable | None] = (),
              edit: Mapping[str, Edit | Sequence[Edit]] | None = None, grad: bool | Iterable[str] = False,
              *, sites: SiteMap | None = None, any_thread: bool = False) -> Iterator[Run]:
    """Watch and edit named sites of `model` while the block runs (module doc; the sites:
    :mod:`~probe.engine.sites`).

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model.
    watch : iterable of str, or mapping of str to callable or None
        Sites to watch: a name (or ``name: None``) saves the last forward's tensor in ``run.saved``;
        ``name: fn`` calls ``fn(name, tensor)`` at each forward instead (the live tensor, the site's shape).
    edit : mapping of str to Edit or sequence of Edit, optional
        Edits per site, applied in order before the site is watched.
    grad : bool or iterable of str, default False
        True: keep the gradient of every watched site; or the sites whose gradient to keep (watched too).
        ``run.grads[site]`` after ``backward()``; the forward must run with gradients enabled.
    sites : SiteMap, optional
        The model's :func:`~probe.engine.sites.site_map`, when the caller keeps one.
    any_thread : bool, default False
        Act on forwards of every thread; by default only on this thread's (another thread may run the same
        model meanwhile: the app).

    Yields
    ------
    Run
        ``run.saved``, ``run.grads``.

    Examples
    --------
    >>> from probe.zoo.tiny import build_tiny
    >>> model, _ = build_tiny("llama")
    >>> ids = torch.tensor([[1, 4, 6, 4, 6]])
    >>> with intervene(model, watch=["L1.resid_pre", "L1.attn_out", "L1.mlp_out", "L1.resid_post"]) as run:
    ...     _ = model(input_ids=ids)
    >>> s = run.saved  # the sequential block: resid_post = resid_pre + attn_out + mlp_out
    >>> bool(torch.allclose(s["L1.resid_pre"] + s["L1.attn_out"] + s["L1.mlp_out"], s["L1.resid_post"]))
    True
    """
    found = sites if sites is not None else site_map(model)
    watched, edits, grads = _plan(found, watch, edit, grad)
    run = Run(found, sorted(grads))
    owner = None if any_thread else threading.get_ident()
    order = {name: index for index, name in enumerate(found.names())}
    groups: dict[tuple[int, bool], list[Site]] = {}
    for name in sorted(set(watched) | set(edits), key=lambda name: (name != "embed", order[name])):
        site = found.site(name)
        groups.setdefault((id(site.module), site.before), []).append(site)
    # a pre-norm block's q/k/v inputs read the norm's input: a pre-hook keeps it (unless only replaced)
    stashes = {id(site.source): site.source for members in groups.values() for site in members
               if site.kind in INPUTS and site.source is not None
               and (site.name in watched or any(e.op != "replace" for e in edits.get(site.name, ())))}
    shared: dict[int, torch.Tensor] = {}  # id(norm) -> its input in this forward
    hooks: list[tuple[nn.Module, str, Callable]] = []
    for (key, before), members in groups.items():
        group = _Hooks(run, members, edits, watched, grads, owner, stashes.get(key) if before else None)
        group.stashed = shared
        hooks.append((members[0].module, "before_kwargs", group.before) if before
                     else (members[0].module, "after", group.after))
    for key, norm in stashes.items():
        if (key, True) not in groups:  # else attn_in's hook keeps it
            group = _Hooks(run, [], edits, watched, grads, owner, stash=norm)
            group.stashed = shared
            hooks.append((norm, "before_kwargs", group.before))
    with hooked(hooks):
        yield run


HOOK_KINDS = ("before", "before_kwargs", "after", "after_kwargs")


def unregistered_skipped(fn: Callable, kind: str) -> Callable:
    """`fn` (a ``*_kwargs`` hook) made safe against torch's two-step registration: torch stores the hook, then
    marks it as taking kwargs, and a forward in another thread between the two calls it without them. That
    call comes before the hook is registered: it is skipped (None), as a forward a moment earlier would be."""
    wanted = 3 if kind == "after_kwargs" else 2  # (args, kwargs, output) / (args, kwargs)

    def hook(module, *rest):
        return fn(module, *rest) if len(rest) == wanted else None

    return hook


@contextlib.contextmanager
def hooked(hooks: Iterable[tuple[nn.Module, str, Callable]]) -> Iterator[None]:
    """Raw forward hooks on modules while the block runs, all removed after it (also on an exception): the one
    place where probe registers a hook, under :func:`intervene` and the eager capture fallback
    (:mod:`probe.engine.eager`, which reads α from modules outside the named sites).

    Parameters
    ----------
    hooks : iterable of (module, kind, fn)
        `kind`: ``"before"`` (``fn(module, args)``), ``"before_kwargs"`` (``fn(module, args, kwargs)``),
        ``"after"`` (``fn(module, args, output)``) or ``"after_kwargs"`` (``fn(module, args, kwargs,
        output)``), as torch's forward (pre-)hooks: a return value other than None replaces the input /
        output.

    Examples
    --------
    >>> layer = torch.nn.Linear(2, 2)
    >>> with hooked([(layer, "after", lambda module, args, output: output * 0)]):
    ...     print(layer(torch.ones(1, 2)).abs().sum().item())
    0.0
    >>> len(layer._forward_hooks)
    0
    """
    handles = []
    try:
        for module, kind, fn in hooks:
            if kind not in HOOK_KINDS:
                raise ProbeError(f"unknown hook kind {kind!r}: {', '.join(HOOK_KINDS)}")
            hook = unregistered_skipped(fn, kind) if kind.endswith("kwargs") else fn
            if kind.startswith("before"):
                handles.append(module.register_forward_pre_hook(hook, with_kwargs=kind.endswith("kwargs")))
            else:
                handles.append(module.register_forward_hook(hook, with_kwargs=kind.endswith("kwargs")))
        yield
    finally:
        for handle in handles:
            handle.remove()


__all__ = ["Edit", "Grads", "HOOK_KINDS", "MODEL_SITES", "OPS", "Run", "hooked", "intervene",
           "unregistered_skipped"]
