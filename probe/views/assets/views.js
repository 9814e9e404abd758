// probe views: the clientside code shared by the Dash app's explorer, the inline notebook view and the one-file
// HTML report (docs/views.md). No dependency, no network: shipped inside the package (probe/views/assets/).
//
// window.probeViews.core: the pure pieces (decoding α, max-pooling, axis labels, a head's max, the dominant offset,
// the targets' share, the token view's colours, a head step) - the app's assets/explorer.js and keys.js use them.
// window.probeViews.mount(root, data): the standalone view (grid of every head, one head's α with the token view,
// keys to step heads and layers, PNG/SVG export) for data written by probe/views/view.py.
// window.probeViews.mountCircuit(root, data, options): a head type's circuit as a layered graph, or (data.kind
// "task") a task's circuit over every edge of the model (probe/views/circuit.py).
(function () {
    "use strict";
    if (window.probeViews && window.probeViews.version >= 1) { return; }  // one copy per page (several outputs)
    var BLUES = [[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
                 [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]];  // plotly's Blues, as the app
    var BINS = 256;  // as app/figures.py HEATMAP_BINS

    // --- core: pure functions -------------------------------------------------------------------------------

    /** @param {string} base64 @returns {Uint8Array} */
    function bytesOf(base64) {  // base64 -> Uint8Array
        var text = atob(base64), bytes = new Uint8Array(text.length);
        for (var i = 0; i < text.length; i++) { bytes[i] = text.charCodeAt(i); }
        return bytes;
    }

    /** @param {string} base64 @param {number} scale @returns {Float32Array} */
    function decodeUint16(base64, scale) {  // the app's payload: uint16 round(α · scale) -> Float32Array
        var raw = new Uint16Array(bytesOf(base64).buffer), alpha = new Float32Array(raw.length);
        for (var j = 0; j < raw.length; j++) { alpha[j] = raw[j] / scale; }
        return alpha;
    }

    /** @param {string} base64 @returns {Float32Array} */
    function float32Of(base64) { return new Float32Array(bytesOf(base64).buffer); }

    /** @param {Uint8Array} bytes @param {number} offset @param {number} count @param {number} top
     *  @returns {Float32Array} */
    function dequantise(bytes, offset, count, top) {  // uint8 q scaled to the head's max: α = q / 255 · top
        var out = new Float32Array(count), factor = top / 255;
        for (var i = 0; i < count; i++) { out[i] = bytes[offset + i] * factor; }
        return out;
    }

    /** @param {string[]} tokens @param {number} factor @param {number} start @param {number} first
     *  @param {number} count @returns {string[]} */
    function labels(tokens, factor, start, first, count) {  // "3·the", or "8–11·went" per pooled block
        var out = [];
        for (var i = 0; i < count; i += factor) {
            var last = Math.min(i + factor, count) - 1;
            var token = String(tokens[first + i]).trim() || tokens[first + i];
            out.push(factor === 1 ? (start + i) + "·" + token : (start + i) + "–" + (start + last) + "·" + token);
        }
        return out;
    }

    /** @param {ArrayLike<number>} alpha [query key] row-major, n a side @param {number} n @param {number} q0
     *  @param {number} q1 @param {number} k0 @param {number} k1 @param {number} [bins]
     *  @returns {{z: number[][], factor: number}} */
    function pooled(alpha, n, q0, q1, k0, k1, bins) {  // max-pool the window [q0, q1) × [k0, k1) to ≤ bins²
        var rows = q1 - q0, cols = k1 - k0;
        var factor = Math.max(1, Math.ceil(Math.max(rows, cols) / (bins || BINS)));
        var outRows = Math.ceil(rows / factor), outCols = Math.ceil(cols / factor), z = [];
        for (var r = 0; r < outRows; r++) {
            var line = new Array(outCols).fill(0);
            for (var q = q0 + r * factor; q < Math.min(q1, q0 + (r + 1) * factor); q++) {
                var base = q * n;
                for (var c = 0; c < outCols; c++) {
                    var best = line[c];
                    for (var k = k0 + c * factor; k < Math.min(k1, k0 + (c + 1) * factor); k++) {
                        if (alpha[base + k] > best) { best = alpha[base + k]; }
                    }
                    line[c] = best;
                }
            }
            z.push(line);
        }
        return {z: z, factor: factor};
    }

    /** @param {ArrayLike<number>} alpha @param {number} n @param {boolean} causal @returns {number} */
    function headMax(alpha, n, causal) {  // causal: query 0 sees only itself (α = 1), so it is left out
        var best = 1e-6;
        for (var i = causal && n > 1 ? n : 0; i < alpha.length; i++) { if (alpha[i] > best) { best = alpha[i]; } }
        return best;
    }

    /** @param {ArrayLike<number>} alpha @param {number} n @returns {{offset: number, share: number}} */
    function dominantOffset(alpha, n) {  // the most common argmax offset j − i over rows, and its share of rows
        /** @type {{[offset: string]: number}} */
        var counts = {};
        for (var q = 0; q < n; q++) {
            var best = 0, arg = 0;
            for (var k = 0; k < n; k++) { if (alpha[q * n + k] > best) { best = alpha[q * n + k]; arg = k; } }
            counts[arg - q] = (counts[arg - q] || 0) + 1;
        }
        var offset = 0, most = -1;
        Object.keys(counts).forEach(function (key) { if (counts[key] > most) { most = counts[key]; offset = +key; } });
        return {offset: offset, share: most / n};
    }

    /** @param {number} offset @returns {string} */
    function offsetText(offset) {
        if (offset === 0) { return "i"; }
        return offset < 0 ? "i − " + (-offset) : "i + " + offset;
    }

    /** @param {ArrayLike<number>} alpha @param {number} n @param {number[][]} targets [queries, keys]
     *  @param {boolean} causal @returns {{share: number, chance: number, rows: number} | null} */
    function share(alpha, n, targets, causal) {  // as app/panels/explorer.target_share
        /** @type {{[query: string]: number}} */
        var mass = {};
        /** @type {{[query: string]: number}} */
        var count = {};
        for (var t = 0; t < targets[0].length; t++) {
            var q = targets[0][t], k = targets[1][t];
            mass[q] = (mass[q] || 0) + alpha[q * n + k];
            count[q] = (count[q] || 0) + 1;
        }
        var rows = Object.keys(mass);
        if (!rows.length) { return null; }
        var total = 0, chance = 0;
        rows.forEach(function (row) { total += mass[row]; chance += count[row] / (causal ? (+row + 1) : n); });
        return {share: total / rows.length, chance: chance / rows.length, rows: rows.length};
    }

    /** @param {number} x @returns {string} */
    function percent(x) { return Math.round(100 * x) + " %"; }

    /** @param {HTMLCollection | HTMLElement[]} spans @param {ArrayLike<number>} alpha @param {number} n
     *  @param {number | null} focus @param {number | null} pinned @param {string} direction
     *  @param {number} [factor] @param {boolean} [dark] */
    function colourTokens(spans, alpha, n, focus, pinned, direction, factor, dark) {
        // the token view: token i coloured by α(focus → i) ("from") or α(i → focus) ("to"); `factor` tokens per
        // cell of `alpha` (n cells a side) when the view holds a max-pooled map. Contrast (WCAG AA, ≥ 4.5:1):
        // light theme, dark text up to α 0.55, then white text on a blue at least 0.8 opaque; dark theme
        // (`dark`), the page's light text reads on the blue at every α
        factor = factor || 1;
        for (var i = 0; i < spans.length; i++) {
            var weight = 0;
            if (focus !== null && focus !== undefined) {
                var a = Math.floor(focus / factor), b = Math.floor(i / factor);
                weight = direction === "to" ? alpha[b * n + a] : alpha[a * n + b];
            }
            var span = /** @type {HTMLElement} */ (spans[i]);
            var strong = !dark && weight > 0.55;
            span.style.backgroundColor = "rgba(8, 81, 156, " + (strong ? Math.max(weight, 0.8) : weight).toFixed(3) + ")";
            span.style.color = strong ? "white" : "";
            span.className = i === focus ? "token focus" + (pinned === i ? " pinned" : "") : "token";
            span.title = i + " · α " + weight.toFixed(3);
        }
    }

    /** @param {HeadRef} current @param {string} axis "layer" or "head" @param {number} delta
     *  @param {GridShape} shape @returns {HeadRef} */
    function step(current, axis, delta, shape) {  // the next (layer, head), wrapping around
        // shape.attention_layers (optional, ascending): the layers with α (a hybrid's softmax-attention layers);
        // layer steps visit only those, so ↑/↓ never land on a linear-attention or state-space layer
        var next = {layer: current.layer, head: current.head};
        var layers = shape.attention_layers;
        if (axis === "layer" && layers && layers.length) {
            var at = layers.indexOf(current.layer);
            if (at < 0) {  // from a layer without α: the first layer with α past it in the step's direction
                at = delta > 0 ? layers.filter(function (l) { return l < current.layer; }).length - 1
                               : layers.filter(function (l) { return l < current.layer; }).length;
            }
            next.layer = layers[((at + delta) % layers.length + layers.length) % layers.length];
        } else if (axis === "layer") {
            next.layer = ((next.layer + delta) % shape.layers + shape.layers) % shape.layers;
        } else { next.head = ((next.head + delta) % shape.heads + shape.heads) % shape.heads; }
        return next;
    }

    /** @type {{[key: string]: [string, number]}} */
    var STEP_KEYS = {ArrowLeft: ["head", -1], ArrowRight: ["head", 1], ArrowUp: ["layer", -1], ArrowDown: ["layer", 1]};
    /** @type {{[tag: string]: boolean}} */
    var TYPING = {TEXTAREA: true, SELECT: true};
    /** @type {{[type: string]: boolean}} */
    var TEXT_INPUTS = {text: true, search: true, number: true, email: true, url: true, password: true, tel: true};

    /** @param {EventTarget | null} target @returns {boolean} */
    function typing(target) {  // keys typed into a text field, or pressed on a slider's handle, never step heads
        var node = /** @type {HTMLInputElement} */ (target);
        if (!node) { return false; }
        if (node.isContentEditable || TYPING[node.tagName]) { return true; }
        if (node.getAttribute && node.getAttribute("role") === "slider") { return true; }  // its arrows move it
        return node.tagName === "INPUT" && TEXT_INPUTS[(node.type || "text").toLowerCase()] === true;
    }

    /** @param {number} t @returns {number[]} */
    function blues(t) {  // [0, 1] -> [r, g, b] on the Blues scale
        var x = Math.max(0, Math.min(1, t)) * (BLUES.length - 1), low = Math.min(BLUES.length - 2, Math.floor(x));
        var f = x - low, a = BLUES[low], b = BLUES[low + 1];
        return [Math.round(a[0] + (b[0] - a[0]) * f), Math.round(a[1] + (b[1] - a[1]) * f),
                Math.round(a[2] + (b[2] - a[2]) * f)];
    }

    // probe.naming.head_name: "L3H2"; an encoder–decoder's layers carry their stacks' names by flat layer
    // number (`names`: ["enc.L0", …, "cross.L2"], the view's `layer_names`), so its heads read "cross.L0H3"
    /** @param {number} layer @param {string[]} [names] @returns {string} */
    function layerName(layer, names) { return names && names[layer] ? names[layer] : "L" + layer; }
    /** @param {number} layer @param {number} head @param {string[]} [names] @returns {string} */
    function headName(layer, head, names) { return layerName(layer, names) + "H" + head; }

    var core = {bytesOf: bytesOf, decodeUint16: decodeUint16, float32Of: float32Of, dequantise: dequantise,
                labels: labels, pooled: pooled, headMax: headMax, dominantOffset: dominantOffset,
                offsetText: offsetText, share: share, percent: percent, colourTokens: colourTokens, step: step,
                STEP_KEYS: STEP_KEYS, typing: typing, blues: blues, headName: headName, layerName: layerName,
                fixed: fixed, BINS: BINS};

    // --- the standalone view ------------------------------------------------------------------------------------

    /** @template {keyof HTMLElementTagNameMap} K @param {K} tag @param {string} [className] @param {string} [text]
     *  @returns {HTMLElementTagNameMap[K]} */
    function el(tag, className, text) {
        var node = document.createElement(tag);
        if (className) { node.className = className; }
        if (text !== undefined) { node.textContent = text; }
        return node;
    }

    /** @param {string} text @returns {string} */
    function escapeXml(text) {
        return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
            .replace(/"/g, "&quot;");
    }

    /** @param {string} text @param {number} size @returns {string} */
    function short(text, size) { text = String(text); return text.length > size ? text.slice(0, size - 1) + "…" : text; }

    /** One head's map as the view draws it: α [side side], `factor` tokens a cell; `exact` when it is the full
     *  map (data.maps), not the thumbnail.
     *  @typedef {{alpha: Float32Array, side: number, factor: number, exact: boolean}} HeadMap */
    /** The map's geometry in CSS pixels (View.layout).
     *  @typedef {{margin: {l: number, b: number, t: number, r: number}, plot: number, cell: number, width: number,
     *             height: number, side: number}} Geometry */

    /** The standalone view of one input. @constructor @param {HTMLElement} root @param {ViewData} data */
    function View(root, data) {
        this.root = root;
        this.data = data;
        /** @type {GridShape} */
        this.shape = {layers: data.layers, heads: data.heads};
        this.thumbBytes = bytesOf(data.thumbs.data);
        this.thumbScale = float32Of(data.thumbs.scale);
        this.mapBytes = data.maps ? bytesOf(data.maps.data) : new Uint8Array(0);
        this.mapScale = data.maps ? float32Of(data.maps.scale) : new Float32Array(0);
        /** @type {{[layerHead: string]: number}} */
        this.mapIndex = {};
        var self = this;
        (data.maps ? data.maps.index : []).forEach(function (pair, i) { self.mapIndex[pair[0] + ":" + pair[1]] = i; });
        /** @type {{key: string | null, value: HeadMap | null}} */
        this.cache = {key: null, value: null};  // the selected head's map (current())
        var first = data.selected || (data.maps && data.maps.index.length ? data.maps.index[0] : [0, 0]);
        /** @type {HeadRef} */
        this.selected = {layer: first[0], head: first[1]};
        /** @type {string | null} */
        this.headType = data.types && data.types.length ? data.types[0] : null;
        this.perHead = false;
        this.direction = "from";
        /** @type {number | null} */
        this.pinned = null;
        /** @type {number | null} */
        this.hovered = null;
        // set by build() (its elements) and drawMap() (geometry): declared here for the type check, no-ops
        /** @type {HTMLDivElement} */ this.grid;
        /** @type {HTMLDivElement} */ this.gridNote;
        /** @type {HTMLElement} */ this.caption;
        /** @type {HTMLSpanElement} */ this.offsetNote;
        /** @type {HTMLDivElement} */ this.wrap;
        /** @type {HTMLCanvasElement} */ this.canvas;
        /** @type {HTMLDivElement} */ this.rowMark;
        /** @type {HTMLDivElement} */ this.colMark;
        /** @type {HTMLDivElement} */ this.hoverNote;
        /** @type {HTMLDivElement} */ this.tokens;
        /** @type {HTMLDivElement} */ this.tokenNote;
        /** @type {HTMLButtonElement[]} */ this.thumbCanvases;
        /** @type {Geometry | undefined} */ this.geometry;
        this.build();
        this.select(this.selected.layer, this.selected.head);
    }

    View.prototype.build = function () {
        var self = this, data = this.data, root = this.root;
        root.classList.add("probe-view");
        root.setAttribute("tabindex", "0");
        root.textContent = "";
        var title = el("div", "pv-title");
        title.appendChild(el("strong", "", data.title || data.model || "probe"));
        title.appendChild(el("span", "pv-note", " · " + data.n + " tokens · " + data.layers + " layers × " +
                             data.heads + " heads · ←/→ head, ↑/↓ layer (click the view first)"));
        root.appendChild(title);
        var controls = el("div", "pv-controls");
        if (data.types && data.types.length) {
            var label = el("label", "", "badges: ");
            var select = el("select", "pv-type");
            data.types.forEach(function (name) {
                var option = el("option", "", name); option.value = name; select.appendChild(option);
            });
            select.addEventListener("change", function () { self.headType = select.value; self.drawGrid(); });
            label.appendChild(select);
            controls.appendChild(label);
        }
        var scale = el("label", "");
        var box = el("input", "pv-scale"); box.type = "checkbox";
        box.addEventListener("change", function () { self.perHead = box.checked; self.drawGrid(); self.drawMap(); });
        scale.appendChild(box);
        scale.appendChild(document.createTextNode(" colour max = head's max"));
        controls.appendChild(scale);
        [["grid", "png"], ["grid", "svg"], ["map", "png"], ["map", "svg"]].forEach(function (pair) {
            var button = el("button", "pv-export", (pair[0] === "grid" ? "grid" : "map") + " " +
                            pair[1].toUpperCase());
            button.type = "button";
            button.setAttribute("data-export", pair[0] + ":" + pair[1]);
            button.title = "download the " + (pair[0] === "grid" ? "grid of every head" : "head's map with its " +
                                              "token labels") + " as " + pair[1].toUpperCase();
            button.addEventListener("click", function () { self.download(pair[0], pair[1]); });
            controls.appendChild(button);
        });
        root.appendChild(controls);
        var body = el("div", "pv-body");
        var gridBox = el("div", "pv-grid-box");
        this.grid = el("div", "pv-grid");
        this.grid.style.gridTemplateColumns = "26px repeat(" + data.heads + ", minmax(14px, 48px))";
        gridBox.appendChild(this.grid);
        this.gridNote = el("div", "pv-note");
        gridBox.appendChild(this.gridNote);
        body.appendChild(gridBox);
        var mapBox = el("div", "pv-map-box");
        var caption = el("div", "pv-caption");
        this.caption = el("strong", "pv-head-label");
        this.offsetNote = el("span", "pv-note");
        caption.appendChild(this.caption);
        caption.appendChild(document.createTextNode(" "));
        caption.appendChild(this.offsetNote);
        mapBox.appendChild(caption);
        this.wrap = el("div", "pv-map-wrap");
        this.canvas = el("canvas", "pv-map");
        this.rowMark = el("div", "pv-row-mark");
        this.colMark = el("div", "pv-col-mark");
        this.wrap.appendChild(this.canvas);
        this.wrap.appendChild(this.rowMark);
        this.wrap.appendChild(this.colMark);
        mapBox.appendChild(this.wrap);
        this.hoverNote = el("div", "pv-note pv-hover", "hover the map or a token");
        mapBox.appendChild(this.hoverNote);
        var direction = el("div", "pv-controls");
        direction.appendChild(document.createTextNode("token view — hover a token (click pins it), colour by " +
                                                      "attention "));
        ["from", "to"].forEach(function (value) {
            var option = el("label", "");
            var radio = el("input", "pv-direction"); radio.type = "radio"; radio.value = value;
            radio.name = "pv-direction-" + (root.id || Math.random().toString(36).slice(2));
            radio.checked = value === "from";
            radio.addEventListener("change", function () { self.direction = value; self.focusChanged(); });
            option.appendChild(radio);
            option.appendChild(document.createTextNode(value === "from" ? " from it " : " to it"));
            direction.appendChild(option);
        });
        mapBox.appendChild(direction);
        this.tokens = el("div", "pv-tokens token-view");
        data.tokens.forEach(function (token, index) {
            var span = el("span", "token", token);
            span.setAttribute("data-index", String(index));
            self.tokens.appendChild(span);
        });
        mapBox.appendChild(this.tokens);
        this.tokenNote = el("div", "pv-note");
        mapBox.appendChild(this.tokenNote);
        body.appendChild(mapBox);
        root.appendChild(body);
        this.buildGrid();
        this.bindEvents();
    };

    View.prototype.buildGrid = function () {
        var self = this, data = this.data, t = data.thumbs.bins;
        this.thumbCanvases = [];
        this.grid.appendChild(el("div", "pv-corner", ""));
        for (var h = 0; h < data.heads; h++) { this.grid.appendChild(el("div", "pv-axis", "H" + h)); }
        for (var layer = 0; layer < data.layers; layer++) {
            this.grid.appendChild(el("div", "pv-axis", layerName(layer, data.layer_names)));
            for (var head = 0; head < data.heads; head++) {
                var button = el("button", "pv-thumb");
                button.type = "button";
                button.setAttribute("data-layer", String(layer));
                button.setAttribute("data-head", String(head));
                var canvas = el("canvas");
                canvas.width = t; canvas.height = t;
                button.appendChild(canvas);
                button.appendChild(el("span", "pv-badge", ""));
                (function (l, hh) {
                    button.addEventListener("click", function () { self.select(l, hh); self.root.focus(); });
                })(layer, head);
                this.grid.appendChild(button);
                this.thumbCanvases.push(button);
            }
        }
        this.drawGrid();
    };

    /** @param {number} layer @param {number} head @returns {Float32Array} */
    View.prototype.thumbValues = function (layer, head) {  // [t t] Float32Array of one head's thumbnail
        var t = this.data.thumbs.bins, index = layer * this.data.heads + head;
        return dequantise(this.thumbBytes, index * t * t, t * t, this.thumbScale[index]);
    };

    /** @param {ArrayLike<number>} values @param {number} t @returns {number} */
    View.prototype.thumbTop = function (values, t) {  // colour max of a thumbnail
        if (!this.perHead) { return 1.0; }
        return headMax(values, t, this.data.causal);
    };

    /** @param {number} layer @param {number} head @returns {string[] | null} */
    View.prototype.badgeOf = function (layer, head) {
        var marks = this.data.badges && this.headType ? this.data.badges[this.headType] : null;
        return marks ? marks[layer + ":" + head] : null;
    };

    View.prototype.drawGrid = function () {
        var t = this.data.thumbs.bins;
        var names = this.data.layer_names;  // an encoder–decoder's layer names (headName)
        for (var i = 0; i < this.thumbCanvases.length; i++) {
            var button = this.thumbCanvases[i];
            var layer = Number(button.getAttribute("data-layer")), head = Number(button.getAttribute("data-head"));
            var values = this.thumbValues(layer, head);
            paint(/** @type {HTMLCanvasElement} */ (button.firstChild), values, t, this.thumbTop(values, t));
            var badge = this.badgeOf(layer, head), span = /** @type {HTMLSpanElement} */ (button.lastChild);
            span.textContent = badge ? badge[0] : "";
            span.className = "pv-badge " + (badge ? badge[1] : "");
            button.title = headName(layer, head, names) +
                (this.headType && badge ? " " + this.headType + " " + badge[0] : "") +
                (this.headType && badge && badge[2] ? " · not labelled: " + badge[2] : "");
            button.classList.toggle("selected", layer === this.selected.layer && head === this.selected.head);
        }
        var factor = Math.ceil(this.data.n / t);
        this.gridNote.textContent = this.data.n + " tokens" + (factor > 1 ? ", each thumbnail max-pooled " + factor +
            "×" + factor : "") + (this.perHead ? " · colour: each head's own max" : " · colour: α on the fixed 0–1 scale") +
            (this.data.badges && this.headType ? " · badge: " + this.headType + " score, ✓ labelled, grey not labelled (hover: why)" : "");
    };

    /** @param {HTMLCanvasElement} canvas @param {ArrayLike<number>} values @param {number} side @param {number} top
     *  @returns {HTMLCanvasElement} */
    function paint(canvas, values, side, top) {  // values [side side] -> pixels on the Blues scale over [0, top]
        canvas.width = side; canvas.height = side;
        var context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
        var image = context.createImageData(side, side);
        for (var i = 0; i < side * side; i++) {
            var rgb = blues(values[i] / top);
            image.data[4 * i] = rgb[0]; image.data[4 * i + 1] = rgb[1]; image.data[4 * i + 2] = rgb[2];
            image.data[4 * i + 3] = 255;
        }
        context.putImageData(image, 0, 0);
        return canvas;
    }

    /** @returns {HeadMap} */
    View.prototype.current = function () {  // {alpha, side, factor, exact} of the selected head
        var key = this.selected.layer + ":" + this.selected.head;
        if (this.cache.key === key) { return /** @type {HeadMap} */ (this.cache.value); }
        var index = this.mapIndex[key], value;
        if (index !== undefined) {
            var maps = /** @type {NonNullable<ViewData["maps"]>} */ (this.data.maps), b = maps.bins;
            value = {alpha: dequantise(this.mapBytes, index * b * b, b * b, this.mapScale[index]), side: b,
                     factor: maps.factor, exact: true};
        } else {
            var t = this.data.thumbs.bins;
            value = {alpha: this.thumbValues(this.selected.layer, this.selected.head), side: t,
                     factor: Math.ceil(this.data.n / t), exact: false};
        }
        this.cache = {key: key, value: value};
        return value;
    };

    /** @param {number} layer @param {number} head */
    View.prototype.select = function (layer, head) {
        this.selected = {layer: layer, head: head};
        this.root.setAttribute("data-layer", String(layer));
        this.root.setAttribute("data-head", String(head));
        for (var i = 0; i < this.thumbCanvases.length; i++) {
            var button = this.thumbCanvases[i];
            button.classList.toggle("selected", Number(button.getAttribute("data-layer")) === layer &&
                                    Number(button.getAttribute("data-head")) === head);
        }
        this.drawMap();
    };

    /** @param {number} width @param {number} [cap] @returns {Geometry} */
    View.prototype.layout = function (width, cap) {  // the map's geometry in CSS pixels
        var side = this.current().side, margin = {l: 112, b: 96, t: 8, r: 12};
        var plot = Math.max(120, Math.min(width, cap || 560) - margin.l - margin.r);  // fits 1280×800 beside the grid
        return {margin: margin, plot: plot, cell: plot / side, width: plot + margin.l + margin.r,
                height: plot + margin.t + margin.b, side: side};
    };

    /** @returns {string[]} */
    View.prototype.axisLabels = function () {
        var view = this.current(), n = this.data.n;
        return labels(this.data.tokens, view.factor, 0, 0, n).slice(0, view.side);
    };

    View.prototype.drawMap = function () {
        var view = this.current();
        var name = headName(this.selected.layer, this.selected.head, this.data.layer_names);
        var width = this.wrap.clientWidth || 560;
        var geometry = this.layout(width);
        this.geometry = geometry;
        var top = this.perHead ? headMax(view.alpha, view.side, this.data.causal) : 1.0;
        drawHeatmap(this.canvas, view.alpha, geometry, this.axisLabels(), top, window.devicePixelRatio || 1);
        this.canvas.style.width = geometry.width + "px";
        this.canvas.style.height = geometry.height + "px";
        var what = view.factor === 1 ? "" : " · max α over " + view.factor + "×" + view.factor + " tokens";
        this.caption.textContent = name + " · " + this.data.n + " tokens" + what;
        var dominant = dominantOffset(view.alpha, view.side);
        this.offsetNote.textContent = view.factor === 1 ? "dominant offset: argmax = " + offsetText(dominant.offset) +
            " in " + percent(dominant.share) + " of rows" : "";
        this.tokenNote.textContent = !view.exact ? name + " is not among this view's full maps (its thumbnail is " +
            "shown): pass heads=[...] or a larger budget" : (view.factor > 1 ? "token view: α of the " + view.factor +
            "-token blocks (the map is max-pooled; pass a larger budget for every token)" : "");
        this.focusChanged();
    };

    /** @param {HTMLCanvasElement} canvas @param {ArrayLike<number>} alpha @param {Geometry} g
     *  @param {string[]} axis @param {number} top @param {number} ratio */
    function drawHeatmap(canvas, alpha, g, axis, top, ratio) {
        canvas.width = Math.round(g.width * ratio); canvas.height = Math.round(g.height * ratio);
        var context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
        context.setTransform(ratio, 0, 0, ratio, 0, 0);
        context.clearRect(0, 0, g.width, g.height);
        var cells = paint(document.createElement("canvas"), alpha, g.side, top);
        context.imageSmoothingEnabled = false;
        context.drawImage(cells, g.margin.l, g.margin.t, g.plot, g.plot);
        context.strokeStyle = "#999"; context.lineWidth = 1;
        context.strokeRect(g.margin.l - 0.5, g.margin.t - 0.5, g.plot + 1, g.plot + 1);
        var every = Math.max(1, Math.ceil(g.side / 40));
        context.fillStyle = getComputedStyle(canvas).color || "#212529";
        context.font = Math.max(8, Math.min(12, g.cell * every * 0.9)) + "px ui-monospace, monospace";
        context.textBaseline = "middle";
        for (var i = 0; i < g.side; i += every) {
            var y = g.margin.t + (i + 0.5) * g.cell, x = g.margin.l + (i + 0.5) * g.cell;
            context.textAlign = "right";
            context.fillText(short(axis[i], 14), g.margin.l - 4, y);
            context.save();
            context.translate(x, g.margin.t + g.plot + 4);
            context.rotate(-Math.PI / 3);
            context.fillText(short(axis[i], 14), 0, 0);
            context.restore();
        }
        context.textAlign = "center";
        context.fillText("key →", g.margin.l + g.plot / 2, g.height - 8);
        context.save();
        context.translate(10, g.margin.t + g.plot / 2);
        context.rotate(-Math.PI / 2);
        context.fillText("query →", 0, 0);
        context.restore();
    }

    /** @param {HTMLElement} mark @param {number | null | undefined} index @param {boolean} row */
    View.prototype.mark = function (mark, index, row) {  // a highlighted row (query) or column (key) of the map
        var g = this.geometry;
        if (index === null || index === undefined || !g) { mark.style.display = "none"; return; }
        var view = this.current(), cell = Math.floor(index / view.factor);
        mark.style.display = "block";
        mark.setAttribute(row ? "data-row" : "data-col", String(index));
        mark.setAttribute("data-bin", String(cell));
        if (row) {
            mark.style.left = g.margin.l + "px"; mark.style.width = g.plot + "px";
            mark.style.top = (g.margin.t + cell * g.cell) + "px"; mark.style.height = Math.max(2, g.cell) + "px";
        } else {
            mark.style.top = g.margin.t + "px"; mark.style.height = g.plot + "px";
            mark.style.left = (g.margin.l + cell * g.cell) + "px"; mark.style.width = Math.max(2, g.cell) + "px";
        }
    };

    View.prototype.focusChanged = function () {
        var view = this.current(), focus = this.pinned !== null ? this.pinned : this.hovered;
        colourTokens(this.tokens.children, view.alpha, view.side, focus, this.pinned, this.direction, view.factor);
        this.mark(this.rowMark, this.direction === "from" ? focus : null, true);
        this.mark(this.colMark, this.direction === "to" ? focus : null, false);
    };

    /** @param {MouseEvent} event @returns {{row: number, col: number} | null} */
    View.prototype.cellAt = function (event) {
        var g = this.geometry, box = this.canvas.getBoundingClientRect();
        if (!g) { return null; }
        var x = event.clientX - box.left - g.margin.l, y = event.clientY - box.top - g.margin.t;
        if (x < 0 || y < 0 || x >= g.plot || y >= g.plot) { return null; }
        return {row: Math.floor(y / g.cell), col: Math.floor(x / g.cell)};
    };

    View.prototype.bindEvents = function () {
        var self = this;
        this.tokens.addEventListener("mouseover", function (event) {
            var target = /** @type {HTMLElement} */ (event.target);
            var token = target.closest ? target.closest(".token") : null;
            if (!token || self.pinned !== null) { return; }
            self.hovered = parseInt(/** @type {string} */ (token.getAttribute("data-index")), 10);
            self.focusChanged();
        });
        this.tokens.addEventListener("click", function (event) {
            var target = /** @type {HTMLElement} */ (event.target);
            var token = target.closest ? target.closest(".token") : null;
            if (!token) { return; }
            var index = parseInt(/** @type {string} */ (token.getAttribute("data-index")), 10);
            self.pinned = self.pinned === index ? null : index;
            self.hovered = index;
            self.focusChanged();
        });
        this.canvas.addEventListener("mousemove", function (event) {
            var cell = self.cellAt(event), view = self.current();
            if (!cell) { self.hoverNote.textContent = "hover the map or a token"; return; }
            var axis = self.axisLabels();
            self.hoverNote.textContent = "query " + axis[cell.row] + " → key " + axis[cell.col] + " · " +
                (view.factor === 1 ? "α " : "max α ") + view.alpha[cell.row * view.side + cell.col].toFixed(4);
            if (self.pinned === null) {
                self.mark(self.rowMark, cell.row * view.factor, true);
                self.mark(self.colMark, cell.col * view.factor, false);
            }
        });
        this.canvas.addEventListener("mouseleave", function () { self.focusChanged(); });
        this.root.addEventListener("keydown", function (event) {
            var move = STEP_KEYS[event.key];
            if (!move || typing(event.target) || event.altKey || event.ctrlKey || event.metaKey) { return; }
            event.preventDefault();  // the page (or Jupyter's command mode) would scroll or change cells
            event.stopPropagation();
            var next = step(self.selected, move[0], move[1], self.shape);
            self.select(next.layer, next.head);
        });
        if (window.ResizeObserver) {
            var last = 0;
            new ResizeObserver(function () {
                var width = self.wrap.clientWidth;
                if (Math.abs(width - last) > 4) { last = width; self.drawMap(); }
            }).observe(this.wrap);
        }
    };

    // --- figures for papers: the same pictures as PNG (canvas) and SVG (vector labels) ------------------------

    /** @param {string} which "grid" or "map" @param {string} format "png" or "svg" @returns {string} */
    View.prototype.fileName = function (which, format) {
        var base = (this.data.model || "probe").replace(/[^A-Za-z0-9._-]+/g, "_");
        var head = headName(this.selected.layer, this.selected.head, this.data.layer_names);
        return base + "_" + (which === "grid" ? "grid" : head) + "." +
            format;
    };

    /** @param {number} scale @returns {HTMLCanvasElement} */
    View.prototype.gridCanvas = function (scale) {  // the grid of every head as one canvas (labels drawn)
        var data = this.data, t = data.thumbs.bins, cell = 40, gap = 4, left = 34, topMargin = 20;
        var width = left + data.heads * (cell + gap), height = topMargin + data.layers * (cell + gap);
        var canvas = document.createElement("canvas");
        canvas.width = width * scale; canvas.height = height * scale;
        var context = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
        context.scale(scale, scale);
        context.fillStyle = "white"; context.fillRect(0, 0, width, height);
        context.imageSmoothingEnabled = false;
        context.fillStyle = "#333"; context.font = "11px sans-serif"; context.textAlign = "center";
        context.textBaseline = "middle";
        for (var h = 0; h < data.heads; h++) { context.fillText("H" + h, left + h * (cell + gap) + cell / 2, 10); }
        for (var layer = 0; layer < data.layers; layer++) {
            context.fillStyle = "#333";
            var rowName = layerName(layer, data.layer_names);
            context.fillText(rowName, 14, topMargin + layer * (cell + gap) + cell / 2);
            for (var head = 0; head < data.heads; head++) {
                var values = this.thumbValues(layer, head);
                var tile = paint(document.createElement("canvas"), values, t, this.thumbTop(values, t));
                context.drawImage(tile, left + head * (cell + gap), topMargin + layer * (cell + gap), cell, cell);
            }
        }
        return canvas;
    };

    /** @param {number} scale @returns {HTMLCanvasElement} */
    View.prototype.mapCanvas = function (scale) {  // one head's map with its token labels, 640 px wide
        var view = this.current(), g = this.layout(640, 640);
        var canvas = document.createElement("canvas");
        canvas.style.color = "#212529";
        document.body.appendChild(canvas);
        var top = this.perHead ? headMax(view.alpha, view.side, this.data.causal) : 1.0;
        drawHeatmap(canvas, view.alpha, g, this.axisLabels(), top, scale);
        document.body.removeChild(canvas);
        var out = document.createElement("canvas");  // on white (the view's own canvas is transparent)
        out.width = canvas.width; out.height = canvas.height;
        var context = /** @type {CanvasRenderingContext2D} */ (out.getContext("2d"));
        context.fillStyle = "white"; context.fillRect(0, 0, out.width, out.height);
        context.drawImage(canvas, 0, 0);
        return out;
    };

    /** @param {string} which @returns {string} */
    View.prototype.png = function (which) {  // a PNG data: URI at twice the screen size
        return (which === "grid" ? this.gridCanvas(2) : this.mapCanvas(2)).toDataURL("image/png");
    };

    /** @param {string} which @returns {string} */
    View.prototype.svg = function (which) {
        var data = this.data, parts = [], t = data.thumbs.bins;
        /** @param {HTMLCanvasElement} canvas @param {number} x @param {number} y @param {number} w
         *  @param {number} h @returns {string} */
        function image(canvas, x, y, w, h) {
            return '<image x="' + x + '" y="' + y + '" width="' + w + '" height="' + h + '" ' +
                'preserveAspectRatio="none" style="image-rendering:pixelated" href="' + canvas.toDataURL("image/png") +
                '"/>';
        }
        if (which === "grid") {
            var cell = 40, gap = 4, left = 34, topMargin = 20;
            var width = left + data.heads * (cell + gap), height = topMargin + data.layers * (cell + gap);
            parts.push('<svg xmlns="http://www.w3.org/2000/svg" width="' + width + '" height="' + height +
                       '" viewBox="0 0 ' + width + " " + height + '" font-family="sans-serif" font-size="11">');
            parts.push('<rect width="100%" height="100%" fill="white"/>');
            for (var h = 0; h < data.heads; h++) {
                parts.push('<text x="' + (left + h * (cell + gap) + cell / 2) + '" y="12" text-anchor="middle">H' + h +
                           "</text>");
            }
            for (var layer = 0; layer < data.layers; layer++) {
                parts.push('<text x="14" y="' + (topMargin + layer * (cell + gap) + cell / 2 + 4) +
                           '" text-anchor="middle">' + escapeXml(layerName(layer, data.layer_names)) +
                           "</text>");
                for (var head = 0; head < data.heads; head++) {
                    var values = this.thumbValues(layer, head);
                    var title = escapeXml(headName(layer, head, data.layer_names));
                    parts.push("<g><title>" + title + "</title>" +
                               image(paint(document.createElement("canvas"), values, t, this.thumbTop(values, t)),
                                     left + head * (cell + gap), topMargin + layer * (cell + gap), cell, cell) + "</g>");
                }
            }
        } else {
            var view = this.current(), g = this.layout(640, 640), axis = this.axisLabels();
            var top = this.perHead ? headMax(view.alpha, view.side, data.causal) : 1.0;
            parts.push('<svg xmlns="http://www.w3.org/2000/svg" width="' + g.width + '" height="' + g.height +
                       '" viewBox="0 0 ' + g.width + " " + g.height + '" font-family="monospace">');
            parts.push('<rect width="100%" height="100%" fill="white"/>');
            parts.push(image(paint(document.createElement("canvas"), view.alpha, g.side, top), g.margin.l, g.margin.t,
                             g.plot, g.plot));
            var every = Math.max(1, Math.ceil(g.side / 40));
            var size = Math.max(8, Math.min(12, g.cell * every * 0.9)).toFixed(1);
            for (var i = 0; i < g.side; i += every) {
                var y = g.margin.t + (i + 0.5) * g.cell, x = g.margin.l + (i + 0.5) * g.cell, text = escapeXml(axis[i]);
                parts.push('<text x="' + (g.margin.l - 4) + '" y="' + y.toFixed(2) + '" font-size="' + size +
                           '" text-anchor="end" dominant-baseline="middle">' + text + "</text>");
                parts.push('<text transform="translate(' + x.toFixed(2) + "," + (g.margin.t + g.plot + 4) +
                           ') rotate(-60)" font-size="' + size + '" text-anchor="end" dominant-baseline="middle">' +
                           text + "</text>");
            }
            parts.push('<text x="' + (g.margin.l + g.plot / 2) + '" y="' + (g.height - 6) +
                       '" text-anchor="middle" font-size="12">key</text>');
            parts.push('<text transform="translate(12,' + (g.margin.t + g.plot / 2) +
                       ') rotate(-90)" text-anchor="middle" font-size="12">query</text>');
            var selectedName = headName(this.selected.layer, this.selected.head, data.layer_names);
            parts.push("<title>" + escapeXml(selectedName + " · " +
                                             (data.model || "")) + "</title>");
        }
        parts.push("</svg>");
        return parts.join("\n");
    };

    /** @param {string} which @param {string} format @returns {string} the file's name */
    View.prototype.download = function (which, format) {
        var name = this.fileName(which, format);
        /** @type {string} */
        var href;
        if (format === "svg") {
            href = URL.createObjectURL(new Blob([this.svg(which)], {type: "image/svg+xml"}));
        } else {
            href = this.png(which);
        }
        var link = document.createElement("a");
        link.href = href; link.download = name;
        document.body.appendChild(link);
        link.click();
        document.body.removeChild(link);
        if (format === "svg") { setTimeout(function () { URL.revokeObjectURL(href); }, 1000); }
        return name;
    };

    // --- tables: click a header to sort (the labelled-heads table of a notebook or a report) --------------------

    /** @param {HTMLTableElement} table */
    function sortable(table) {
        var headers = table.querySelectorAll("thead th");
        headers.forEach(function (th, column) {
            th.addEventListener("click", function () {
                var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
                var ascending = th.getAttribute("data-order") !== "asc";
                headers.forEach(function (other) { other.removeAttribute("data-order"); });
                th.setAttribute("data-order", ascending ? "asc" : "desc");
                rows.sort(function (a, b) {
                    var x = a.cells[column].getAttribute("data-sort"), y = b.cells[column].getAttribute("data-sort");
                    var nx = parseFloat(x), ny = parseFloat(y), result;
                    if (!isNaN(nx) && !isNaN(ny)) { result = nx - ny; }
                    else if (isNaN(nx) !== isNaN(ny)) { return isNaN(nx) ? 1 : -1; }  // unknown last
                    else { result = String(x).localeCompare(String(y)); }
                    return ascending ? result : -result;
                });
                rows.forEach(function (row) { body.appendChild(row); });
            });
        });
    }

    // --- circuits: a head type's circuit as a layered graph (data from probe/views/circuit.py: the notebook's
    // probe.show_circuit, the report's circuit section, the app's circuit panel). Layers left to right, a head's
    // row is its index; nodes coloured by label, edges coloured by mode and as wide as their effect; a click on a
    // node selects the head (options.onSelect: the app selects it on the page). -------------------------------

    var SVG_NS = "http://www.w3.org/2000/svg";
    /** @type {{[mode: string]: string}} */
    var MODE_COLOURS = {Q: "#1f77b4", K: "#e8590c", V: "#2f9e44"};
    var TYPE_COLOURS = ["#4c6ef5", "#d6336c", "#7048e8", "#1098ad", "#f08c00", "#5c940d", "#862e9c", "#495057"];

    /** @param {string} tag @param {{[name: string]: string | number}} attrs @param {string} [text]
     *  @returns {SVGElement} */
    function svgNode(tag, attrs, text) {
        var node = /** @type {SVGElement} */ (document.createElementNS(SVG_NS, tag));
        Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
        if (text !== undefined) { node.textContent = text; }
        return node;
    }

    /** @param {number | null | undefined} value @param {number} digits @param {boolean} [sign] "+" before ≥ 0
     *  @returns {string} */
    function fixed(value, digits, sign) {  // a number, or "unknown" (NaN arrives as null)
        if (value === null || value === undefined || !isFinite(value)) { return "unknown"; }
        var text = Number(value).toFixed(digits);
        if (text.charAt(0) === "-" && Number(text) === 0) { text = text.slice(1); }  // never "-0.0": naming.fixed
        return sign && Number(text) >= 0 ? "+" + text : text;
    }

    /** @param {CircuitEdge} edge @returns {string} */
    function edgeText(edge) {
        var text = edge.sender + " → " + edge.receiver + " · " + edge.mode + "-composition " + fixed(edge.score, 3) +
            " (z " + fixed(edge.z, 1) + " against random matrices)";
        if (edge.patched) {
            text += " · path patching " + fixed(edge.effect, 2, true) + " nats into every receiver (z " +
                fixed(edge.effect_z, 1) + "), " + fixed(edge.edge_effect, 3, true) + " into " + edge.receiver + " alone";
        } else {
            text += " · not patched";
        }
        return text + (edge.in_circuit ? " · in the circuit" : " · candidate");
    }

    /** @param {{nodes: CircuitNode[], edges: CircuitEdge[], heads: number, show_all: boolean}} data
     *  @param {number} width */
    function circuitLayout(data, width) {
        /** @type {number[]} */
        var layers = [];
        data.nodes.forEach(function (node) { if (layers.indexOf(node.layer) < 0) { layers.push(node.layer); } });
        (data.show_all ? data.edges : []).forEach(function (edge) {
            [edge.sender, edge.receiver].forEach(function (name) {
                var layer = +name.slice(1, name.indexOf("H"));
                if (layers.indexOf(layer) < 0) { layers.push(layer); }
            });
        });
        layers.sort(function (a, b) { return a - b; });
        var left = 80, right = 80, top = 40, row = Math.max(22, Math.min(44, 520 / Math.max(1, data.heads)));
        var column = layers.length > 1 ? Math.max(110, (width - left - right) / (layers.length - 1)) : 0;
        /** @type {{[layer: number]: number}} */
        var at = {};
        layers.forEach(function (layer, index) { at[layer] = left + index * column; });
        return {layers: layers, x: at, top: top, row: row, width: left + right + column * Math.max(0, layers.length - 1),
                height: top + data.heads * row + 16};
    }

    /** A head type's circuit as a layered graph. @constructor @param {HTMLElement} root @param {CircuitData} data
     *  @param {CircuitOptions} [options] */
    function CircuitView(root, data, options) {
        this.root = root; this.data = data; this.options = options || {};
        this.showAll = false;
        /** @type {HeadRef | null} */
        this.selected = null;
        /** @type {SVGElement} */ this.svgNode;  // set by draw(): declared here for the type check, a no-op
        /** @type {string[]} */
        var types = [];
        data.nodes.forEach(function (node) {
            String(node.labels || "").split(" ").forEach(function (t) { if (t && types.indexOf(t) < 0) { types.push(t); } });
        });
        this.types = types.sort();
        root.classList.add("probe-circuit");
        root.textContent = "";
        root.appendChild(el("div", "pc-title", "circuit · " + (data.head_type || "") + " · " + (data.model || "")));
        var controls = el("div", "pc-controls"), self = this;
        var toggle = el("label", "pc-toggle"), box = document.createElement("input");
        box.type = "checkbox";
        box.addEventListener("change", function () { self.showAll = box.checked; self.draw(); });
        toggle.appendChild(box); toggle.appendChild(document.createTextNode(" candidate edges too"));
        controls.appendChild(toggle);
        var legend = el("span", "pc-legend");
        Object.keys(MODE_COLOURS).forEach(function (mode) {
            var key = el("span", "pc-key", mode);
            key.style.borderBottom = "3px solid " + MODE_COLOURS[mode];
            legend.appendChild(key);
        });
        legend.appendChild(document.createTextNode(" edge width: patching effect (nats)"));
        controls.appendChild(legend);
        root.appendChild(controls);
        this.figure = el("div", "pc-figure");
        root.appendChild(this.figure);
        this.info = el("div", "pc-info", "click a head for its edges");
        root.appendChild(this.info);
        var lines = el("ul", "pc-lines");
        (data.lines || []).concat(data.notes || []).forEach(function (line) { lines.appendChild(el("li", "", line)); });
        root.appendChild(lines);
        this.draw();
    }

    /** @param {string | null} headLabels @returns {string} */
    CircuitView.prototype.colourOf = function (headLabels) {
        var first = String(headLabels || "").split(" ")[0];
        var index = this.types.indexOf(first);
        return index < 0 ? "#adb5bd" : TYPE_COLOURS[index % TYPE_COLOURS.length];
    };

    CircuitView.prototype.draw = function () {
        var data = this.data, self = this;
        var edges = data.edges.filter(function (edge) { return self.showAll || edge.in_circuit; });
        var g = circuitLayout({nodes: data.nodes, edges: edges, heads: data.heads, show_all: this.showAll},
                              Math.max(360, this.figure.clientWidth || 640));
        var svg = svgNode("svg", {width: g.width, height: g.height, viewBox: "0 0 " + g.width + " " + g.height,
                                  "font-family": "system-ui, sans-serif", "font-size": "11", role: "img"});
        svg.appendChild(svgNode("title", {}, "circuit of " + data.head_type + " in " + data.model));
        g.layers.forEach(function (layer) {
            svg.appendChild(svgNode("text", {x: g.x[layer], y: 14, "text-anchor": "middle", fill: "currentColor"},
                                    "L" + layer));
        });
        /** @param {string} name */
        function point(name) {
            var h = name.indexOf("H"), layer = +name.slice(1, h), head = +name.slice(h + 1);
            return {x: g.x[layer], y: g.top + head * g.row + g.row / 2, layer: layer, head: head};
        }
        var top = 0;
        edges.forEach(function (edge) {
            var size = edge.patched ? edge.effect : edge.score;
            if (size !== null && isFinite(size)) { top = Math.max(top, Math.abs(size)); }
        });
        edges.forEach(function (edge) {
            var a = point(edge.sender), b = point(edge.receiver), dx = (b.x - a.x) / 2;
            var size = edge.patched ? edge.effect : edge.score;
            var width = edge.in_circuit ? 1.5 + 7 * (top > 0 && size !== null && isFinite(size) ? Math.abs(size) / top : 0) : 1;
            var path = svgNode("path", {d: "M" + a.x + " " + a.y + " C" + (a.x + dx) + " " + a.y + " " + (b.x - dx) +
                                          " " + b.y + " " + b.x + " " + b.y,
                                       fill: "none", stroke: MODE_COLOURS[edge.mode] || "#868e96",
                                       "stroke-width": width.toFixed(2), "stroke-opacity": edge.in_circuit ? 0.85 : 0.45,
                                       "stroke-dasharray": edge.in_circuit ? "" : "4 3", "class": "pc-edge",
                                       "data-sender": edge.sender, "data-receiver": edge.receiver, "data-mode": edge.mode});
            path.appendChild(svgNode("title", {}, edgeText(edge)));
            svg.appendChild(path);
        });
        /** @type {{[head: string]: {head: string, layer: number, head_index: number, labels: string | null,
         *                             role: string}}} */
        var shown = {};
        data.nodes.forEach(function (node) { shown[node.head] = node; });
        edges.forEach(function (edge) {
            [edge.sender, edge.receiver].forEach(function (name) {
                if (!shown[name]) { var p = point(name); shown[name] = {head: name, layer: p.layer, head_index: p.head, labels: "", role: "candidate"}; }
            });
        });
        Object.keys(shown).forEach(function (name) {
            var node = shown[name], p = point(name);
            var group = svgNode("g", {"class": "pc-node" + (node.role === "receiver" ? " receiver" : ""),
                                     "data-layer": node.layer, "data-head": node.head_index, tabindex: "0",
                                     cursor: "pointer"});
            group.appendChild(svgNode("circle", {cx: p.x, cy: p.y, r: node.role === "candidate" ? 5 : 8,
                                                fill: self.colourOf(node.labels),
                                                stroke: node.role === "receiver" ? "currentColor" : "none",
                                                "stroke-width": 2}));
            group.appendChild(svgNode("text", {x: p.x, y: p.y - 11, fill: "currentColor", "text-anchor": "middle",
                                               "font-size": "10"},
                                      name + (node.labels ? " · " + node.labels.replace(/_/g, " ") : "")));
            group.appendChild(svgNode("title", {}, name + (node.labels ? " · labelled " + node.labels : "") +
                                                   (node.role === "receiver" ? " · a " + data.head_type + " head" : "")));
            group.addEventListener("click", function () { self.select(node.layer, node.head_index, true); });
            group.addEventListener("keydown", function (/** @type {KeyboardEvent} */ event) {
                if (event.key === "Enter") { self.select(node.layer, node.head_index, true); }
            });
            svg.appendChild(group);
        });
        this.figure.textContent = "";
        this.figure.appendChild(svg);
        this.svgNode = svg;
        if (this.selected) { this.select(this.selected.layer, this.selected.head, false); }
    };

    /** @param {number} layer @param {number} head @param {boolean} fromUser */
    CircuitView.prototype.select = function (layer, head, fromUser) {
        var name = "L" + layer + "H" + head;
        this.selected = {layer: layer, head: head};
        this.root.setAttribute("data-layer", String(layer));
        this.root.setAttribute("data-head", String(head));
        this.figure.querySelectorAll(".pc-node").forEach(function (node) {
            var mine = Number(node.getAttribute("data-layer")) === layer &&
                Number(node.getAttribute("data-head")) === head;
            node.classList.toggle("selected", mine);
        });
        var mine = this.data.edges.filter(function (edge) {
            return edge.in_circuit && (edge.sender === name || edge.receiver === name);
        });
        this.info.textContent = mine.length ? mine.map(edgeText).join(" | ") : name + ": no edge of the circuit";
        if (fromUser) {
            if (this.options.onSelect) { this.options.onSelect(layer, head); }
            this.root.dispatchEvent(new CustomEvent("probe-circuit-select", {detail: {layer: layer, head: head}}));
        }
    };

    /** @returns {string} */
    CircuitView.prototype.svg = function () {  // the drawn graph as an SVG file's text (colours resolved)
        var copy = /** @type {SVGSVGElement} */ (this.svgNode.cloneNode(true));
        copy.setAttribute("xmlns", SVG_NS);
        copy.setAttribute("color", getComputedStyle(this.root).color || "#212529");
        return new XMLSerializer().serializeToString(copy);
    };


    // --- a task's circuit (probe circuit --task, TaskCircuit.payload: data.kind "task"): every edge of the model
    // scored, drawn left to right (embed, each layer's heads then its MLP, logits); an edge is coloured by its
    // score's sign, as wide as |score|, dashed by the receiver's input (q solid, k dashed, v dotted) and ends at
    // that input's port; the circuit by default, the strongest other edges on request; hover an edge for its
    // numbers; the faithfulness curve beside the graph, the circuit's size marked. ---------------------------

    /** @type {{[sign: string]: string}} */
    var SIGN_COLOURS = {negative: "#1c7ed6", positive: "#e8590c"};
    /** @type {{[input: string]: string}} */
    var INPUT_DASHES = {q: "", k: "6 3", v: "1.5 3", mlp: "", logits: ""};
    /** @type {{[input: string]: number}} */
    var INPUT_PORTS = {q: -4, k: 0, v: 4, mlp: 0, logits: 0};

    /** @param {TaskEdge} edge @param {number} total @returns {string} */
    function taskEdgeText(edge, total) {
        return edge.sender + " → " + edge.receiver + " (" + edge.input + ") · score " + fixed(edge.score, 4, true) +
            " · rank " + edge.abs_rank + " of " + total + " by |score|" +
            (edge.in_circuit ? " · in the circuit" : " · not in the circuit");
    }

    /** @param {number} x @param {number} digits @returns {string} */
    function rounded(x, digits) { return String(Number(x.toFixed(digits))); }

    /** A task's circuit over every edge of the model. @constructor @param {HTMLElement} root
     *  @param {TaskCircuitData} data @param {CircuitOptions} [options] */
    function TaskCircuitView(root, data, options) {
        this.root = root; this.data = data; this.options = options || {};
        var circuit = data.edges.filter(function (edge) { return edge.in_circuit; }).length;
        this.showAll = circuit === 0;  // no circuit reached the share: the strongest edges, not an empty graph
        /** @type {string | null} */
        this.selectedName = null;
        /** @type {SVGElement} */ this.svgNode;  // set by draw()
        /** @type {{[name: string]: TaskNode}} */
        this.nodeOf = {};
        var self = this;
        data.nodes.forEach(function (node) { self.nodeOf[node.name] = node; });
        root.classList.add("probe-circuit", "task");
        root.textContent = "";
        root.appendChild(el("div", "pc-title", "circuit · " + data.model + " · " + (data.method || "") + " on " +
                            (data.metric || "") + " · " + data.total_edges + " edges scored"));
        var controls = el("div", "pc-controls");
        var toggle = el("label", "pc-toggle"), box = document.createElement("input");
        box.type = "checkbox";
        box.checked = this.showAll;
        box.addEventListener("change", function () { self.showAll = box.checked; self.draw(); });
        var others = data.edges.length - circuit;
        toggle.appendChild(box);
        toggle.appendChild(document.createTextNode(" the " + others + " strongest other edges too" +
                                                   (data.left_out ? " (" + data.left_out + " weaker not shipped)" : "")));
        controls.appendChild(toggle);
        var legend = el("span", "pc-legend");
        [["negative", "score < 0"], ["positive", "score > 0"]].forEach(function (pair) {
            var key = el("span", "pc-key", pair[1]);
            key.style.borderBottom = "3px solid " + SIGN_COLOURS[pair[0]];
            legend.appendChild(key);
        });
        legend.appendChild(document.createTextNode(" width: |score| · input: q solid, k dashed, v dotted"));
        controls.appendChild(legend);
        root.appendChild(controls);
        var body = el("div", "pt-body");
        this.figure = el("div", "pc-figure");
        this.curve = el("div", "pt-curve");
        body.appendChild(this.figure);
        body.appendChild(this.curve);
        root.appendChild(body);
        this.info = el("div", "pc-info", circuit ? "hover an edge for its score; click a node for its edges" :
                       "no top-n set on the curve keeps the share asked for: the strongest edges are shown");
        root.appendChild(this.info);
        var lines = el("ul", "pc-lines");
        (data.lines || []).slice(0, 1).forEach(function (line) { lines.appendChild(el("li", "", line)); });
        if (data.clean_metric !== null) {
            lines.appendChild(el("li", "", (data.metric || "metric") + ": clean " + fixed(data.clean_metric, 3) +
                                 ", corrupted " + fixed(data.corrupted_metric, 3) + " (" + (data.corruption || "") +
                                 ")" + (data.pairs ? ", " + data.pairs + " pairs" : "")));
        }
        (data.notes || []).forEach(function (line) { lines.appendChild(el("li", "", line)); });  // the twins' search
        root.appendChild(lines);
        this.drawCurve();
        this.draw();
    }

    TaskCircuitView.prototype.draw = function () {
        var data = this.data, self = this;
        var edges = data.edges.filter(function (edge) { return self.showAll || edge.in_circuit; });
        edges.sort(function (a, b) { return Math.abs(a.score || 0) - Math.abs(b.score || 0); });  // strongest on top
        var columns = 0;
        data.nodes.forEach(function (node) { columns = Math.max(columns, node.column); });
        var left = 34, right = 40, top = 30, available = Math.max(360, (this.figure.clientWidth || 720) - 4);
        var spacing = Math.max(46, (available - left - right) / Math.max(1, columns));
        var row = Math.max(14, Math.min(48, 440 / Math.max(1, data.rows)));
        var width = left + right + spacing * columns, height = top + data.rows * row + 10;
        /** @param {TaskNode} node @returns {{x: number, y: number}} */
        function at(node) { return {x: left + node.column * spacing, y: top + node.row * row + row / 2}; }
        var svg = svgNode("svg", {width: rounded(width, 1), height: rounded(height, 1),
                                  viewBox: "0 0 " + rounded(width, 1) + " " + rounded(height, 1),
                                  "font-family": "system-ui, sans-serif", "font-size": "10", role: "img"});
        svg.appendChild(svgNode("title", {}, "circuit of the task in " + data.model));
        /** @type {{[column: number]: string}} */
        var headers = {};
        data.nodes.forEach(function (node) {
            headers[node.column] = node.kind === "embed" ? "embed" : node.kind === "logits" ? "logits" :
                node.kind === "mlp" ? "mlp" : "L" + node.layer;
        });
        Object.keys(headers).forEach(function (column) {
            svg.appendChild(svgNode("text", {x: rounded(left + Number(column) * spacing, 1), y: 12, fill: "currentColor",
                                             "text-anchor": "middle"}, headers[+column]));
        });
        var strongest = 0;
        edges.forEach(function (edge) { strongest = Math.max(strongest, Math.abs(edge.score || 0)); });
        /** @type {{[name: string]: boolean}} */
        var touched = {};
        /** @type {{[port: string]: boolean}} */
        var ports = {};
        edges.forEach(function (edge) {
            var sender = self.nodeOf[edge.sender], receiver = self.nodeOf[edge.receiver];
            if (!sender || !receiver) { return; }
            touched[edge.sender] = touched[edge.receiver] = true;
            ports[edge.receiver + ":" + edge.input] = true;
            var a = at(sender), b = at(receiver), x0 = a.x + 6, x1 = b.x - 7, y1 = b.y + (INPUT_PORTS[edge.input] || 0);
            var dx = Math.max(12, (x1 - x0) / 2);
            var d = "M" + rounded(x0, 1) + " " + rounded(a.y, 1) + " C" + rounded(x0 + dx, 1) + " " + rounded(a.y, 1) +
                " " + rounded(x1 - dx, 1) + " " + rounded(y1, 1) + " " + rounded(x1, 1) + " " + rounded(y1, 1);
            var size = strongest > 0 && edge.score !== null ? Math.abs(edge.score) / strongest : 0;
            var group = svgNode("g", {"class": "pt-edge" + (edge.in_circuit ? " in-circuit" : " candidate"),
                                      "data-sender": edge.sender, "data-receiver": edge.receiver,
                                      "data-input": edge.input, "data-rank": edge.abs_rank});
            group.appendChild(svgNode("path", {d: d, fill: "none", "class": "pc-edge",
                                               stroke: SIGN_COLOURS[(edge.score || 0) < 0 ? "negative" : "positive"],
                                               "stroke-width": rounded(0.6 + 5.4 * size, 2),
                                               "stroke-opacity": edge.in_circuit ? 0.8 : 0.3,
                                               "stroke-dasharray": INPUT_DASHES[edge.input] || ""}));
            group.appendChild(svgNode("path", {d: d, fill: "none", stroke: "transparent", "stroke-width": 7,
                                               "class": "pt-hit", "pointer-events": "stroke"}));
            group.appendChild(svgNode("title", {}, taskEdgeText(edge, data.total_edges)));
            group.addEventListener("mouseenter", function () {
                group.classList.add("hover");
                self.info.textContent = taskEdgeText(edge, data.total_edges);
            });
            group.addEventListener("mouseleave", function () { group.classList.remove("hover"); });
            svg.appendChild(group);
        });
        data.nodes.forEach(function (node) {
            var p = at(node), on = touched[node.name] === true, square = node.kind !== "head" && node.kind !== "kv";
            var group = svgNode("g", {"class": "pc-node pt-node" + (on ? " on" : ""), "data-name": node.name,
                                      "data-layer": node.layer, "data-head": node.index, tabindex: "0",
                                      cursor: "pointer", opacity: on ? 1 : 0.35});
            var fill = node.kind === "kv" ? "#868e96" : square ? "#495057" : "#4c6ef5";
            group.appendChild(square ? svgNode("rect", {x: p.x - 6, y: rounded(p.y - 6, 1), width: 12, height: 12, rx: 2,
                                                        fill: fill}) :
                              svgNode("circle", {cx: p.x, cy: rounded(p.y, 1), r: on ? 5 : 4, fill: fill}));
            ["q", "k", "v"].forEach(function (input) {
                if (ports[node.name + ":" + input]) {  // the input's port: where its edges end
                    group.appendChild(svgNode("circle", {cx: p.x - 7, cy: rounded(p.y + INPUT_PORTS[input], 1), r: 1.6,
                                                         fill: "currentColor", "class": "pt-port"}));
                }
            });
            if (!square && row >= 18) {
                group.appendChild(svgNode("text", {x: p.x + 7, y: rounded(p.y - 5, 1), fill: "currentColor",
                                                   "font-size": "9"}, (node.kind === "kv" ? "KV" : "H") + node.index));
            }
            group.appendChild(svgNode("title", {}, node.name + (on ? "" : " · no edge shown")));
            group.addEventListener("click", function () { self.selectNode(node.name, true); });
            group.addEventListener("keydown", function (/** @type {KeyboardEvent} */ event) {
                if (event.key === "Enter") { self.selectNode(node.name, true); }
            });
            svg.appendChild(group);
        });
        this.figure.textContent = "";
        this.figure.appendChild(svg);
        this.svgNode = svg;
        if (this.selectedName) { this.selectNode(this.selectedName, false); }
    };

    TaskCircuitView.prototype.drawCurve = function () {  // share kept vs the top-n edges, random circuits dashed
        var data = this.data, points = data.curve.filter(function (p) { return p.share !== null; });
        if (!points.length) { return; }
        var w = 280, h = 190, l = 38, r = 10, t = 18, b = 30;
        var most = 0, low = 0, high = 1;
        points.forEach(function (p) {
            most = Math.max(most, p.edges);
            [p.share, p.random_share].forEach(function (v) {
                if (v !== null && isFinite(v)) { low = Math.min(low, v); high = Math.max(high, v); }
            });
        });
        /** @param {number} edges @returns {number} */
        function x(edges) { return l + (w - l - r) * Math.log1p(edges) / Math.log1p(Math.max(1, most)); }
        /** @param {number} value @returns {number} */
        function y(value) { return t + (h - t - b) * (high - value) / (high - low); }
        var svg = svgNode("svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img",
                                  "font-family": "system-ui, sans-serif", "font-size": "10"});
        svg.appendChild(svgNode("title", {}, "faithfulness: the share of the clean − corrupted gap kept by the " +
                                             "top-n edges, and by random circuits of n edges"));
        svg.appendChild(svgNode("text", {x: l, y: 11, fill: "currentColor"}, "share of the gap kept"));
        svg.appendChild(svgNode("path", {d: "M" + l + " " + t + " V" + (h - b) + " H" + (w - r), fill: "none",
                                         stroke: "currentColor", "stroke-opacity": 0.5}));
        /** @type {number[]} */
        var labelled = [];  // the ticks' y, so that no two labels overlap
        [0, 1].concat(data.share !== null ? [data.share] : [], low < -0.1 ? [Number(low.toFixed(1))] : []).forEach(function (v) {
            var free = labelled.every(function (other) { return Math.abs(other - y(v)) >= 10; });
            if (free) {
                labelled.push(y(v));
                svg.appendChild(svgNode("text", {x: l - 4, y: rounded(y(v) + 3, 1), "text-anchor": "end",
                                                 fill: "currentColor"}, String(v)));
            }
            svg.appendChild(svgNode("path", {d: "M" + l + " " + rounded(y(v), 1) + " H" + (w - r), stroke: "currentColor",
                                             "stroke-opacity": 0.2, "stroke-dasharray": v === data.share ? "3 3" : ""}));
        });
        points.forEach(function (p, i) {
            if (i === 0 || i === points.length - 1 || p.edges === data.size) {
                svg.appendChild(svgNode("text", {x: rounded(x(p.edges), 1), y: h - b + 12, "text-anchor": "middle",
                                                 fill: "currentColor"}, String(p.edges)));
            }
        });
        svg.appendChild(svgNode("text", {x: (l + w - r) / 2, y: h - 4, "text-anchor": "middle", fill: "currentColor"},
                                "top-n edges (log scale)"));
        if (data.size !== null) {
            var size = data.size;
            svg.appendChild(svgNode("path", {d: "M" + rounded(x(size), 1) + " " + t + " V" + (h - b), stroke: "#d62728",
                                             "stroke-width": 1.5, "class": "pt-size"}));
            var after = x(size) < (l + w - r) / 2;  // the label on the side with room
            svg.appendChild(svgNode("text", {x: rounded(x(size) + (after ? 4 : -4), 1), y: h - b - 6, fill: "#d62728",
                                             "text-anchor": after ? "start" : "end"}, "circuit: " + size + " edges"));
        }
        [["random_share", "#868e96", "4 3"], ["share", "#1c7ed6", ""]].forEach(function (line) {
            var key = /** @type {"share" | "random_share"} */ (line[0]), d = "";
            points.forEach(function (p) {
                var v = p[key];
                if (v !== null && isFinite(v)) { d += (d ? " L" : "M") + rounded(x(p.edges), 1) + " " + rounded(y(v), 1); }
            });
            svg.appendChild(svgNode("path", {d: d, fill: "none", stroke: line[1], "stroke-width": 1.8,
                                             "stroke-dasharray": line[2], "class": "pt-" + key}));
        });
        points.forEach(function (p) {
            var dot = svgNode("circle", {cx: rounded(x(p.edges), 1), cy: rounded(y(/** @type {number} */ (p.share)), 1),
                                         r: 3, fill: "#1c7ed6", "class": "pt-point"});
            dot.appendChild(svgNode("title", {}, "top " + p.edges + " edges: share " + fixed(p.share, 3) +
                                                 " · random circuits " + fixed(p.random_share, 3)));
            svg.appendChild(dot);
        });
        this.curve.appendChild(svg);
        this.curve.appendChild(el("div", "pt-caption", "blue: the top-n edges by |score| · grey dashed: random " +
                                  "circuits of n edges"));
    };

    /** @param {string} name @param {boolean} fromUser */
    TaskCircuitView.prototype.selectNode = function (name, fromUser) {
        var data = this.data, self = this, node = this.nodeOf[name];
        if (!node) { return; }
        this.selectedName = name;
        this.figure.querySelectorAll(".pt-node").forEach(function (group) {
            group.classList.toggle("selected", group.getAttribute("data-name") === name);
        });
        var mine = data.edges.filter(function (edge) {
            return (self.showAll || edge.in_circuit) && (edge.sender === name || edge.receiver === name);
        });
        this.info.textContent = mine.length ? mine.slice(0, 8).map(function (edge) {
            return taskEdgeText(edge, data.total_edges);
        }).join(" | ") + (mine.length > 8 ? " | … " + (mine.length - 8) + " more" : "") : name + ": no edge shown";
        if (node.kind === "head") {
            this.root.setAttribute("data-layer", String(node.layer));
            this.root.setAttribute("data-head", String(node.index));
            if (fromUser) {
                if (this.options.onSelect) { this.options.onSelect(node.layer, node.index); }
                this.root.dispatchEvent(new CustomEvent("probe-circuit-select",
                                                        {detail: {layer: node.layer, head: node.index}}));
            }
        }
    };

    /** @param {number} layer @param {number} head @param {boolean} fromUser */
    TaskCircuitView.prototype.select = function (layer, head, fromUser) {
        this.selectNode("L" + layer + "H" + head, fromUser);
    };

    TaskCircuitView.prototype.svg = CircuitView.prototype.svg;

    /** @param {HTMLElement} root @param {CircuitData | TaskCircuitData} data @param {CircuitOptions} [options] */
    function mountCircuit(root, data, options) {
        var view = data.kind === "task" ? new TaskCircuitView(root, data, options) : new CircuitView(root, data, options);
        root.probeCircuit = view;
        return view;
    }

    /** @param {HTMLElement} root @param {ViewData} data */
    function mount(root, data) {
        var view = new View(root, data);
        root.probeView = view;
        return view;
    }

    function mountAll() {  // every element with data-probe-view="ID" whose data is in <script id="ID">
        var views = /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("[data-probe-view]"));
        views.forEach(function (root) {
            if (root.probeView) { return; }
            var source = document.getElementById(/** @type {string} */ (root.getAttribute("data-probe-view")));
            if (source) { mount(root, JSON.parse(/** @type {string} */ (source.textContent))); }
        });
        var circuits = /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("[data-probe-circuit]"));
        circuits.forEach(function (root) {
            if (root.probeCircuit) { return; }
            var source = document.getElementById(/** @type {string} */ (root.getAttribute("data-probe-circuit")));
            if (source) { mountCircuit(root, JSON.parse(/** @type {string} */ (source.textContent))); }
        });
        var tables = /** @type {NodeListOf<HTMLTableElement>} */ (document.querySelectorAll("table.probe-table"));
        tables.forEach(function (table) {
            if (!table.probeSortable) { table.probeSortable = true; sortable(table); }
        });
    }

    window.probeViews = {version: 1, core: core, mount: mount, mountAll: mountAll, sortable: sortable,
                         mountCircuit: mountCircuit};
})();
