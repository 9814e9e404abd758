"""The circuit panel, beside the atlas: the selected head type's circuit (probe.circuits) as a layered graph
drawn by the view layer's views.js (``mountCircuit``: the same code as the notebook and the report). Found on
demand ("Find circuit": composition and path patching, seconds on an organism); a click on a head in the graph
selects it on the page, and the page's selection is marked in the graph. "Upload a task" takes your own
task (.csv or .jsonl pairs, as ``probe circuit --task FILE``; at most the server's upload limit) and draws its
circuit over every edge of the model (EAP-IG, scored once per model and file, as a job through the inference
gate and the job slots), by the same mountCircuit."""

from __future__ import annotations

from dash import Input, Output, State, ctx, dcc, html

from probe.errors import ProbeError
from probe.naming import display_name

from .. import ids
from ..errors import guarded
from ..panel import Panel, card_panel
from ..service import Service
from .page import head_types_for

TASK_UPLOAD = "circuit-task-upload"  # dcc.Upload: a task file (this panel's own id, Panel.ids)
TASK_ACCEPT = ".csv,.jsonl"
PROMPT = ("press 'Find circuit': the earlier heads whose composition and path-patching effects on this "
          "type's labelled heads beat their controls")


def layout(upload_bytes: int = 5 * 2**20) -> html.Div:
    note = (f"your task: .csv or .jsonl pairs (clean, corrupted, correct, incorrect; docs/circuits.md), "
            f"{upload_bytes / 2**20:g} MiB or less; every edge of the model scored")
    task = html.Div(dcc.Upload(id=TASK_UPLOAD, className="upload", max_size=upload_bytes, accept=TASK_ACCEPT,
                               children=html.Button("Upload a task")), title=note, className="task-upload")
    return card_panel("Circuit", [
        html.Div([html.Button("Find circuit", id=ids.CIRCUIT_RUN), task,
                  html.Span(PROMPT, id=ids.CIRCUIT_NOTE, className="note")], className="controls"),
        html.Div(id=ids.CIRCUIT_MESSAGE, className="message"),
        dcc.Loading(html.Div(id=ids.CIRCUIT_GRAPH, className="circuit-host"), type="dot"),
        dcc.Store(id=ids.CIRCUIT_DATA), dcc.Store(id=ids.CIRCUIT_SINK), dcc.Store(id=ids.CIRCUIT_SELECT_SINK),
    ], className="circuit-panel")


def task_payload(service: Service, spec: str, contents: str | None, filename: str | None) -> tuple[dict, str]:
    """(the graph's data, the note): an uploaded task's circuit over every edge of `spec` (size-checked, a
    .csv or .jsonl, its rows checked by :func:`probe.circuits.task.load_task`)."""
    from .proteins import decode_upload

    data = decode_upload(contents, filename, service.config.upload_bytes)
    if data is None:
        raise ProbeError("the upload is empty; upload the task again")
    found = service.circuits.task_payload(spec, str(filename or ""), data)
    size = "no top-n set keeps 80 % of the gap" if found["size"] is None else \
        f"{found['size']} edges in the circuit"
    return found, f"your task · {found['total_edges']} edges scored by {found['method']} · {size}"


def circuit_payload(service: Service, spec: str, head_type: str, find: bool) -> tuple[dict | None, str]:
    """(the graph's data or None, the note beside the button): the circuit found now (`find`) or already; a
    head type that does not apply to the model (a crafted value) is refused in one line."""
    types = head_types_for(service, spec)
    if not isinstance(head_type, str) or head_type not in types:
        shown = repr(head_type)[:40] if isinstance(head_type, str) else f"of type {type(head_type).__name__}"
        raise ProbeError(f"head type {shown} does not apply to {display_name(spec)}: choose one of "
                         f"{', '.join(types)}")
    found = service.circuits.circuit(spec, head_type) if find else service.circuits.cached(spec, head_type)
    if found is None:
        return None, PROMPT
    edges = int(found.edges["in_circuit"].sum()) if len(found.edges) else 0
    return found.payload(), f"{edges} edges in the circuit · {found.forwards} forwards"


# mounts the graph (views.js) and sends a clicked head to the page's selection
MOUNT = """function (data) {
    var root = document.getElementById("HOST");
    if (!root || !window.probeViews) { return window.dash_clientside.no_update; }
    if (!data) { root.textContent = ""; root.probeCircuit = null; return null; }
    window.probeViews.mountCircuit(root, data, {onSelect: function (layer, head) {
        window.dash_clientside.set_props("SELECTED", {data: {layer: layer, head: head}});
    }});
    return data.model + ":" + (data.kind === "task" ? "task" : data.head_type);
}""".replace("HOST", ids.CIRCUIT_GRAPH).replace("SELECTED", ids.SELECTED)

# marks the page's selected head in the graph
MARK = """function (selected, mounted) {
    var root = document.getElementById("HOST");
    if (root && root.probeCircuit && selected) {
        root.probeCircuit.select(selected.layer, selected.head, false);
    }
    return selected ? selected.layer + ":" + selected.head : null;
}""".replace("HOST", ids.CIRCUIT_GRAPH)


def register(app, service: Service) -> None:
    @app.callback(Output(ids.CIRCUIT_DATA, "data"), Output(ids.CIRCUIT_NOTE, "children"),
                  Output(ids.CIRCUIT_MESSAGE, "children"),
                  Input(ids.CIRCUIT_RUN, "n_clicks"), Input(ids.MODEL, "value"),
                  Input(ids.HEAD_TYPE, "value"), Input(ids.LABEL_VERSION, "data"),
                  Input(TASK_UPLOAD, "contents"), State(TASK_UPLOAD, "filename"),
                  State(ids.CIRCUIT_DATA, "data"))
    @guarded(outputs=3, message=2)
    def _circuit(_clicks, spec, head_type, _version, contents, filename, _shown):
        if service.facts.unusable(spec):
            return None, "", ""
        if ctx.triggered_id == TASK_UPLOAD:
            data, note = task_payload(service, spec, contents, filename)
            return data, note, ""
        data, note = circuit_payload(service, spec, head_type, find=ctx.triggered_id == ids.CIRCUIT_RUN)
        return data, note, ""

    app.clientside_callback(MOUNT, Output(ids.CIRCUIT_SINK, "data"), Input(ids.CIRCUIT_DATA, "data"))
    app.clientside_callback(MARK, Output(ids.CIRCUIT_SELECT_SINK, "data"), Input(ids.SELECTED, "data"),
                            Input(ids.CIRCUIT_SINK, "data"))


PANEL = Panel("circuit", register=register, where="left", ids=(TASK_UPLOAD,),
              layout=lambda service, state: layout(service.config.upload_bytes))
