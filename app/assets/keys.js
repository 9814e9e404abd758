// Keyboard and step buttons: ←/→ previous/next head, ↑/↓ previous/next layer, Ctrl+Enter runs.
// Arrows step whatever control was clicked last (a radio button or checkbox never keeps them), except while typing.
// Every press counts: the next selection is computed here from the last one asked for (not from the server's
// answer), so fast presses queue instead of being dropped.
(function () {
    var core = window.probeViews.core;  // probe/views/assets/views.js: the view layer shared with notebooks
    var typing = core.typing;

    /** @param {string} axis "layer" or "head" @param {number} delta */
    function step(axis, delta) {
        var state = window.probeState;
        if (!state || !state.shape || !window.dash_clientside || !window.dash_clientside.set_props) { return; }
        var current = state.pending || state.selected || {layer: 0, head: 0};
        var next = core.step(current, axis, delta, state.shape);
        state.pending = next;
        var probe = window.dash_clientside.probe;
        if (probe && probe.fastStep && probe.fastStep(next)) {  // redrawn now (assets/explorer.js): let the
            requestAnimationFrame(function () {                   // browser paint it before Dash's callbacks run
                setTimeout(function () {
                    /** @type {NonNullable<DashClientside["set_props"]>} */ (window.dash_clientside.set_props)(
                        "selected-head", {data: next});
                }, 0);
            });
            return;
        }
        window.dash_clientside.set_props("selected-head", {data: next});
    }

    var KEYS = core.STEP_KEYS;

    document.addEventListener("keydown", function (event) {
        if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
            var inProtein = event.target && /** @type {HTMLElement} */ (event.target).id === "protein-sequence";
            var run = document.getElementById(inProtein ? "protein-run" : "explorer-run");
            if (run) { event.preventDefault(); run.click(); }
            return;
        }
        var move = KEYS[event.key];
        if (!move || typing(event.target) || event.altKey || event.ctrlKey || event.metaKey) { return; }
        event.preventDefault();  // a focused radio button would otherwise change the model or head type
        event.stopPropagation();
        step(move[0], move[1]);
    }, true);

    document.addEventListener("click", function (event) {
        var target = /** @type {HTMLElement} */ (event.target);
        var button = target && target.closest && target.closest("button.step");
        if (!button) { return; }
        var parts = (button.getAttribute("data-step") || "").split(":");
        step(parts[0], parseInt(parts[1], 10));
    }, true);

    // The toolbar camera's format (PNG/SVG): dcc.Graph does not re-apply a changed config to a drawn plot, so the
    // switch is written into every drawn plot's own context (read by plotly when the camera is clicked).
    // The atlas selects a head on a single click only: a click waits 300 ms, and a double-click in that time
    // (plotly's reset gesture, a habit from zoomable plots) cancels it, so a double-click never selects a head.
    var lastDoubleClick = 0;
    document.addEventListener("dblclick", function (event) {
        var target = /** @type {HTMLElement} */ (event.target);
        if (target && target.closest && target.closest("#atlas-graph")) { lastDoubleClick = Date.now(); }
    }, true);

    /** @param {{points?: {x: number, y: number}[]} | null} click the atlas's clickData @param {GridShape | null} shape
     *  @returns {object | undefined | Promise<object | undefined>} the head to select, after 300 ms */
    function atlasClick(click, shape) {
        var no = window.dash_clientside.no_update;
        var point = click && click.points && click.points[0];
        if (!point || !shape) { return no; }
        var layer = point.y, head = point.x;
        if (!Number.isInteger(layer) || !Number.isInteger(head) || layer < 0 || layer >= shape.layers ||
            head < 0 || head >= shape.heads) { return no; }
        if (shape.attention_layers && shape.attention_layers.indexOf(layer) < 0) { return no; }  // no α there
        var clickedAt = Date.now();
        return new Promise(function (resolve) {
            setTimeout(function () {
                // clickData is cleared once read: a later click on the same cell is then a change again (the
                // renderer passes on no unchanged value), so a double-click's cell still selects on one click
                /** @type {NonNullable<DashClientside["set_props"]>} */ (window.dash_clientside.set_props)(
                    "atlas-graph", {clickData: null});
                resolve(lastDoubleClick >= clickedAt - 50 ? no : {layer: layer, head: head});
            }, 300);
        });
    }

    window.dash_clientside = window.dash_clientside || {};
    window.dash_clientside.probe = Object.assign({}, window.dash_clientside.probe, {
        atlasClick: atlasClick,
        setImageFormat: function (/** @type {string} */ fmt) {
            var plots = /** @type {NodeListOf<PlotlyGraphDiv>} */ (document.querySelectorAll(".js-plotly-plot"));
            plots.forEach(function (gd) {
                if (!gd._context) { return; }
                var options = Object.assign({}, gd._context.toImageButtonOptions, {format: fmt});
                if (fmt === "svg") { delete options.scale; } else { options.scale = 2; }
                gd._context.toImageButtonOptions = options;
                gd.querySelectorAll(".modebar-btn[data-title^='Download plot']").forEach(function (button) {
                    button.setAttribute("data-title", "Download plot as a " + fmt.toUpperCase());
                });
            });
            return fmt;
        }
    });
})();
