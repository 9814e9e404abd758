// The attention explorer, read in the browser: the server sends one layer's α of every head once (uint16, base64,
// see app/payload.py); the heatmap, the head caption, the dominant offset, the overlay's share and the token view are
// drawn here, so a head step inside a layer and a token hover never wait for the server.
(function () {
    var BINS = 256;  // as app/figures.py HEATMAP_BINS: larger inputs are max-pooled to this many rows and columns
    var BLUES = [[0, "rgb(247,251,255)"], [0.125, "rgb(222,235,247)"], [0.25, "rgb(198,219,239)"],
                 [0.375, "rgb(158,202,225)"], [0.5, "rgb(107,174,214)"], [0.625, "rgb(66,146,198)"],
                 [0.75, "rgb(33,113,181)"], [0.875, "rgb(8,81,156)"], [1, "rgb(8,48,107)"]];  // plotly.py Blues
    /** @type {{key: string | null, alpha: Float32Array | null}} */
    var decoded = {key: null, alpha: null};
    /** @type {{payload: LayerPayload | null, head: number, direction: string, pinned: number | null,
     *          hovered: number | null, dark?: boolean}} */
    var view = {payload: null, head: 0, direction: "from", pinned: null, hovered: null};
    var NO = function () { return window.dash_clientside.no_update; };

    // The pure pieces are the package's view layer (probe/views/assets/views.js, loaded before this file): the
    // same code draws the inline notebook view and the one-file report.
    var core = window.probeViews.core;
    var labels = core.labels, headMax = core.headMax, dominantOffset = core.dominantOffset;
    var offsetText = core.offsetText, share = core.share;
    /** @param {ArrayLike<number>} alpha [query key] @param {number} n @param {number} q0 @param {number} q1
     *  @param {number} k0 @param {number} k1 @returns {{z: number[][], factor: number}} */
    function pooled(alpha, n, q0, q1, k0, k1) { return core.pooled(alpha, n, q0, q1, k0, k1, BINS); }

    /** @param {LayerPayload} payload @returns {Float32Array} α [head query key] */
    function decode(payload) {
        var key = payload.key + ":" + payload.layer;
        if (decoded.key !== key) { decoded = {key: key, alpha: core.decodeUint16(payload.alpha, payload.scale)}; }
        return /** @type {Float32Array} */ (decoded.alpha);
    }

    /** @param {LayerPayload} payload @param {number} head @returns {Float32Array} */
    function headMatrix(payload, head) {  // a Float32Array view [query key] of one head
        var n = payload.n;
        return decode(payload).subarray(head * n * n, (head + 1) * n * n);
    }

    /** @param {TargetPattern | null} pattern @param {number} head @returns {number[][] | null} */
    function targetsOf(pattern, head) {
        if (!pattern || !pattern.heads) { return null; }
        return pattern.heads.length === 1 ? pattern.heads[0] : pattern.heads[head];
    }

    /** @param {string} message @param {object | undefined} template @returns {object} a plotly figure */
    function emptyFigure(message, template) {
        return {data: [], layout: {template: template, xaxis: {visible: false}, yaxis: {visible: false}, height: 320,
            paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
            annotations: [{text: message, showarrow: false, font: {size: 14}, x: 0.5, y: 0.5,
                           xref: "paper", yref: "paper"}]}};
    }

    var percent = core.percent;

    // A head step inside the shown layer redraws only the heatmap's z (Plotly.restyle: the axes, labels and layout
    // stay), straight from the key press, before Dash's callback round: the figure callback then only updates the
    // notes. Anything else (another layer, a per-head overlay, a zoom) goes through the full figure.
    /** @type {{head: number | null}} */
    var fast = {head: null};
    /** @type {{scale: string[] | null, zoom: Zoom | null, pattern?: TargetPattern | null}} */
    var last = {scale: null, zoom: null};

    /** @param {HeadRef} next @returns {boolean} whether the heatmap was redrawn here */
    function fastStep(next) {
        var payload = view.payload;
        var gd = /** @type {PlotlyGraphDiv} */ (document.querySelector("#explorer-heatmap .js-plotly-plot"));
        if (!payload || !gd || !gd._fullData || !gd._fullData.length || next.layer !== payload.layer ||
            !(next.head >= 0 && next.head < payload.heads) || (last.pattern && last.pattern.heads &&
                                                              last.pattern.heads.length > 1)) { return false; }
        var n = payload.n, alpha = headMatrix(payload, next.head);
        var w = last.zoom && last.zoom.q1 <= n && last.zoom.k1 <= n ? last.zoom : {q0: 0, q1: n, k0: 0, k1: n};
        var pool = pooled(alpha, n, w.q0, w.q1, w.k0, w.k1);
        var perHead = last.scale && last.scale.length > 0;
        /** @type {{z: number[][][], zmax?: number[]}} */
        var update = {z: [pool.z]};
        if (perHead) { update.zmax = [headMax(alpha, n, payload.causal)]; }
        // the title and the data revision change with the z: the figure Dash then stores for this head (same
        // revision, same title) redraws nothing, and an export or a re-render shows this head, never the last one
        window.Plotly.update(gd, update, {"title.text": titleText(payload, next.head, pool, w, last.zoom),
                                          datarevision: revision(payload, next.head, last.scale, w)}, [0]);
        var name = headLabel(payload, next.head);
        var caption = document.getElementById("explorer-head-label");
        if (caption) { caption.textContent = name + " · " + n + " tokens"; }
        fast.head = next.head;
        view.head = next.head;
        colourTokens();
        return true;
    }

    /** @param {LayerPayload} payload @param {number} head @param {{factor: number}} pool @param {Zoom} w
     *  @param {Zoom | null} zoom @returns {string} */
    function titleText(payload, head, pool, w, zoom) {
        var suffix = pool.factor === 1 ? "" : " · " + Math.max(w.q1 - w.q0, w.k1 - w.k0) + " tokens in " +
            Math.ceil((w.q1 - w.q0) / pool.factor) + " bins (max-pooled)";
        if (zoom) { suffix += " · zoom: queries " + w.q0 + "–" + (w.q1 - 1) + ", keys " + w.k0 + "–" + (w.k1 - 1); }
        // the model's name too: a downloaded figure (the toolbar's camera) says which model and head it shows
        return headLabel(payload, head) + (payload.model_name ? " · " + payload.model_name : "") + suffix;
    }

    // "L3H2", or an encoder–decoder's "enc.L1H2" / "dec.L0H1" / "cross.L0H3": the layer payload carries its
    // layer's name (app/payload.py)
    /** @param {LayerPayload} payload @param {number} head @returns {string} */
    function headLabel(payload, head) { return (payload.name || core.layerName(payload.layer)) + "H" + head; }

    // cross-attention is [decoder query × encoder key]: the payload names its axes (and the queries' tokens)
    /** @param {LayerPayload} payload @returns {{query: string, key: string}} */
    function axisTitles(payload) {
        return payload.axes ? payload.axes : {query: "query", key: "key"};
    }

    /** @param {LayerPayload} payload @param {number} head @param {string[] | null} scale @param {Zoom} w */
    function revision(payload, head, scale, w) {  // what the heatmap's arrays depend on
        return [payload.key, payload.layer, head, scale && scale.length ? "head" : "fixed", w.q0, w.q1, w.k0, w.k1]
            .join(":");
    }

    /** @param {{light: object, dark: object} | null} templates @param {boolean} dark
     *  @returns {object | undefined} */
    function templateOf(templates, dark) {
        return templates ? templates[dark ? "dark" : "light"] : undefined;
    }

    /** @param {number} pixels @returns {number} */
    function tickCount(pixels) {  // category ticks ~16 px apart, so labels never overlap
        return Math.max(2, Math.min(40, Math.floor(pixels / 16)));
    }

    // heatmap(payload, selected, scale, zoom, pattern, headType, dark, templates)
    //   -> [figure, caption, overlay note, offset note]
    /** @param {LayerPayload | null} payload @param {HeadRef | null} selected @param {string[] | null} scale
     *  @param {Zoom | null} zoom @param {TargetPattern | null} pattern @param {string} headType
     *  @param {boolean} dark @param {{light: object, dark: object} | null} templates @returns {unknown[]} */
    function heatmap(payload, selected, scale, zoom, pattern, headType, dark, templates) {
        last.scale = scale; last.zoom = zoom; last.pattern = pattern;
        fast.head = null;
        var template = templateOf(templates, dark);
        if (!payload) {
            view.payload = null;
            drawTokens();
            return [emptyFigure("type an input and press Run", template), "", "", ""];
        }
        if (payload.error) {
            view.payload = null;
            drawTokens();
            return [emptyFigure(payload.error, template), "", "", ""];
        }
        var head = selected && selected.layer === payload.layer ? selected.head : null;
        if (head === null || !(head >= 0 && head < payload.heads)) { return [NO(), NO(), NO(), NO()]; }
        var n = payload.n, alpha = headMatrix(payload, head);
        var w = zoom && zoom.q1 <= n && zoom.k1 <= n ? zoom : {q0: 0, q1: n, k0: 0, k1: n};
        var pool = pooled(alpha, n, w.q0, w.q1, w.k0, w.k1);
        var ys = labels(payload.query_tokens || payload.tokens, pool.factor, w.q0, w.q0, w.q1 - w.q0);
        var xs = labels(payload.tokens, pool.factor, w.k0, w.k0, w.k1 - w.k0);
        var perHead = scale && scale.length > 0;
        var zmax = perHead ? headMax(alpha, n, payload.causal) : 1.0;
        var scaleText = perHead ? "α (0–" + zmax.toPrecision(3) + ", this head's max" +
            (payload.causal ? " over queries ≥ 1" : "") + ")" : "α (fixed 0–1)";
        var what = pool.factor === 1 ? "α" : "max α over " + pool.factor + "×" + pool.factor + " tokens";
        var name = headLabel(payload, head), axes = axisTitles(payload);
        view.dark = !!dark;
        /** @type {object[]} */
        var traces = [{type: "heatmap", z: pool.z, x: xs, y: ys, colorscale: BLUES, zmin: 0, zmax: zmax,
                       name: "attention", colorbar: {title: {text: scaleText, side: "right"}},
                       hovertemplate: axes.query + " %{y}<br>" + axes.key + " %{x}<br>" + what +
                                      " %{z:.4f}<extra></extra>"}];
        var targets = targetsOf(pattern, head);
        if (targets) {
            /** @type {{[cell: string]: boolean}} */
            var cells = {};
            var px = [], py = [];
            for (var t = 0; t < targets[0].length; t++) {
                var q = targets[0][t], k = targets[1][t];
                if (q < w.q0 || q >= w.q1 || k < w.k0 || k >= w.k1) { continue; }
                var r = Math.floor((q - w.q0) / pool.factor), c = Math.floor((k - w.k0) / pool.factor);
                if (cells[r + ":" + c]) { continue; }
                cells[r + ":" + c] = true;
                px.push(xs[c]); py.push(ys[r]);
            }
            var size = Math.max(4, Math.min(24, Math.floor(420 / Math.max(xs.length, ys.length, 1))));
            traces.push({type: "scatter", mode: "markers", x: px, y: py, name: headType + " targets",
                         hoverinfo: "skip", showlegend: true,
                         marker: {symbol: "square-open", size: size, color: "#ff7f0e", line: {width: 2}}});
        }
        var box = document.getElementById("explorer-heatmap");
        var width = box && box.clientWidth ? box.clientWidth : 700, height = 560;
        var margin = {l: 110, b: 110, t: 70, r: 20};
        var figure = {data: traces, layout: {
            template: template,
            title: {text: titleText(payload, head, pool, w, zoom), font: {size: 13}, x: 0, xanchor: "left", y: 1,
                    yref: "paper", yanchor: "bottom", pad: {b: 8}},
            height: height, margin: margin,
            paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
            // tick labels ~16 px apart (never overlapping) and at most 40 a side: plotly lays out every category
            // label it draws (costly at 256); explicit ranges: a head step's restyle recomputes no autorange
            xaxis: {title: {text: axes.key}, type: "category", tickangle: -60, showgrid: false,
                    nticks: tickCount(width - margin.l - margin.r - 90), range: [-0.5, xs.length - 0.5],
                    autorange: false},
            yaxis: {title: {text: axes.query}, type: "category", showgrid: false,
                    nticks: tickCount(height - margin.t - margin.b), range: [ys.length - 0.5, -0.5],
                    autorange: false},
            legend: {orientation: "h", x: 1, xanchor: "right", y: -0.25, yanchor: "top"},
            datarevision: revision(payload, head, scale, w),
            uirevision: payload.key + (zoom ? JSON.stringify(zoom) : "")}};
        view.payload = payload; view.head = head;
        drawTokens();
        return [figure, name + " · " + n + " tokens"].concat(notes(payload, head, pattern, headType));
    }

    /** @param {LayerPayload} payload @param {number} head @param {TargetPattern | null} pattern
     *  @param {string} headType @returns {string[]} */
    function notes(payload, head, pattern, headType) {  // [overlay note, dominant offset note] of one head
        var n = payload.n, alpha = headMatrix(payload, head), note = "", targets = targetsOf(pattern, head);
        if (pattern && pattern.note) { note = pattern.note; }
        if (targets) {
            var s = share(alpha, n, targets, payload.causal);
            note = s ? "outlined: " + headType + " targets · " + percent(s.share) + " of the attention of the " +
                s.rows + " rows with a target lands on them (a uniform head: " + percent(s.chance) + ")"
                : "this input has no " + headType + " targets";
        }
        var dominant = dominantOffset(alpha, n);
        return [note, "dominant offset: argmax = " + offsetText(dominant.offset) + " in " + percent(dominant.share) +
                " of rows"];
    }

    // --- the token view: spans drawn here, coloured on hover (no server, no React render) ---------------------

    function drawTokens() {
        var box = document.getElementById("explorer-tokens");
        if (!box) { return; }
        var payload = view.payload;
        if (!payload) { box.textContent = ""; box.removeAttribute("data-key"); return; }
        var key = payload.key;
        if (box.getAttribute("data-key") !== key) {
            box.textContent = "";
            payload.tokens.forEach(function (token, index) {
                var span = document.createElement("span");
                span.className = "token";
                span.textContent = token;
                span.setAttribute("data-index", String(index));
                /** @type {HTMLElement} */ (box).appendChild(span);
            });
            box.setAttribute("data-key", key);
            if (view.pinned !== null && view.pinned >= payload.n) { view.pinned = null; }
        }
        colourTokens();
    }

    function colourTokens() {
        var box = document.getElementById("explorer-tokens"), payload = view.payload;
        if (!box || !payload) { return; }
        var focus = view.pinned !== null ? view.pinned : view.hovered;
        core.colourTokens(box.children, headMatrix(payload, view.head), payload.n, focus, view.pinned, view.direction,
                          1, view.dark);
    }

    /** @param {Event} event @returns {Element | null} the token span under the event, if any */
    function tokenOf(event) {
        var target = /** @type {HTMLElement | null} */ (event.target);
        return target && target.closest ? target.closest("#explorer-tokens .token") : null;
    }

    document.addEventListener("mouseover", function (event) {
        var token = tokenOf(event);
        if (!token || view.pinned !== null) { return; }
        view.hovered = parseInt(/** @type {string} */ (token.getAttribute("data-index")), 10);
        colourTokens();
    });

    document.addEventListener("click", function (event) {
        var token = tokenOf(event);
        if (!token) { return; }
        var index = parseInt(/** @type {string} */ (token.getAttribute("data-index")), 10);
        view.pinned = view.pinned === index ? null : index;
        view.hovered = index;
        colourTokens();
        if (window.dash_clientside && window.dash_clientside.set_props) {
            window.dash_clientside.set_props("token-focus", {data: view.pinned === null ? null : {index: view.pinned}});
        }
    });

    /** @param {string} direction @param {{index?: number} | null} focus @returns {null} */
    function tokenState(direction, focus) {  // the direction radio, and a pinned token restored from the URL
        view.direction = direction === "to" ? "to" : "from";
        if (focus && typeof focus.index === "number") { view.pinned = focus.index; }
        colourTokens();
        return null;
    }

    // A relayout event's axis keys ("xaxis.range[0]", "xaxis.range", "xaxis.autorange", …; the server checks the
    // values), or no update for an event that moved no axis. relayoutData holds only the graph's latest event and
    // plotly may emit {autosize: true} right after a zoom: a server callback on relayoutData itself can then see
    // its zoom request superseded by the autosize one, while this store keeps the zoom.
    var AXIS_KEY = /^[xy]axis\.(range(\[[01]\])?|autorange)$/;
    /** @param {{[key: string]: unknown} | null} relayout @returns {object | undefined} */
    function viewOf(relayout) {
        if (!relayout || typeof relayout !== "object") { return NO(); }
        /** @type {{[key: string]: unknown}} */
        var axes = {};
        Object.keys(relayout).forEach(function (key) { if (AXIS_KEY.test(key)) { axes[key] = relayout[key]; } });
        return Object.keys(axes).length ? axes : NO();
    }

    /** @param {HeadRef | null} selected @param {{layer: number} | null} current @returns {object | undefined} */
    function layerOf(selected, current) {
        if (!selected || typeof selected.layer !== "number") { return NO(); }
        if (current && current.layer === selected.layer) { return NO(); }
        return {layer: selected.layer};
    }

    window.dash_clientside = window.dash_clientside || {};
    window.dash_clientside.probe = Object.assign({}, window.dash_clientside.probe, {
        heatmap: heatmap, layerOf: layerOf, viewOf: viewOf, tokenState: tokenState, fastStep: fastStep,
        _view: view,  // read by the browser tests
        _parts: {decode: decode, headMatrix: headMatrix, labels: labels, pooled: pooled, headMax: headMax,
                 dominantOffset: dominantOffset, offsetText: offsetText, share: share, notes: notes,
                 tickCount: tickCount, titleText: titleText, revision: revision, headLabel: headLabel,
                 axisTitles: axisTitles}  // tests/app/test_app_js.py
    });
})();
