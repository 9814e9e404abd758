"""Served names at the browser's boundary: the page, its links and its answers name a model by its served name
(a local folder by its folder's name, :func:`probe_app.registry.served_names`), never by a path of the
server, while the server's own code keeps working with specs.

Every panel registers its callbacks through :class:`ServedNames` instead of the Dash app: a value of the
model selector, and the ``"model"`` entry of a store's dict, arrive as the spec and leave as the served name.
A value that names no served model passes unchanged and is refused by the look-up it reaches, in one line
that lists served names only (:meth:`probe_app.registry.ModelRegistry._check`).
"""

from __future__ import annotations

import functools

from dash import Input, Output, State

from . import ids

MODEL = (ids.MODEL, "value")


def _flat(dependencies) -> list:
    out = []
    for item in dependencies:
        out.extend(_flat(item) if isinstance(item, (list, tuple)) else [item])
    return out


class ServedNames:
    """The Dash app as the panels see it: ``callback`` translates model values both ways, anything else is the
    app's own (``clientside_callback``, ``server``, ...).

    Parameters
    ----------
    app : dash.Dash
        The app.
    registry : ModelRegistry
        ``name_of`` (spec -> served name) and ``spec_of`` (served name -> spec).

    Examples
    --------
    >>> from dash import Dash, Input, Output
    >>> from probe_app.registry import ModelRegistry
    >>> registry = ModelRegistry(["/data/runs/induction"])
    >>> seen = []
    >>> served = ServedNames(Dash("example"), registry)
    >>> @served.callback(Output(ids.MODEL, "value"), Input(ids.MODEL, "value"))
    ... def echo(spec):
    ...     seen.append(spec)
    ...     return spec
    >>> echo("induction"), seen
    ('induction', ['/data/runs/induction'])
    """

    def __init__(self, app, registry) -> None:
        self._app, self._registry = app, registry

    def __getattr__(self, name):
        return getattr(self._app, name)

    def _inward(self, dependency, value):
        if (dependency.component_id, dependency.component_property) == MODEL:
            return self._registry.spec_of(value)
        if isinstance(value, dict) and isinstance(value.get("model"), str):
            return {**value, "model": self._registry.spec_of(value["model"])}
        return value

    def _outward(self, dependency, value):
        if (dependency.component_id, dependency.component_property) == MODEL:
            return self._registry.name_of(value)
        if isinstance(value, dict) and isinstance(value.get("model"), str):
            return {**value, "model": self._registry.name_of(value["model"])}
        return value

    def callback(self, *dependencies, **options):
        """``app.callback``, with model values translated (see the module doc)."""
        flat = _flat(dependencies)
        outputs = [item for item in flat if isinstance(item, Output)]
        inputs = [item for item in flat if isinstance(item, (Input, State))]
        single = len(outputs) == 1 and isinstance(dependencies[0], Output)
        register = self._app.callback(*dependencies, **options)

        def wrap(function):
            @functools.wraps(function)
            def translated(*args):
                args = [self._inward(dependency, value)
                        for dependency, value in zip(inputs, args, strict=False)]
                result = function(*args)
                if single:
                    return self._outward(outputs[0], result)
                if isinstance(result, (list, tuple)) and len(result) == len(outputs):
                    return type(result)(self._outward(dependency, value)
                                        for dependency, value in zip(outputs, result, strict=True))
                return result

            register(translated)
            return translated

        return wrap
