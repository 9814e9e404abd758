// probe structure view: a head's attention on the 3D structure, drawn with 3Dmol.js (vendored beside this file,
// 3Dmol-min.js; no network). The same file for a notebook output, the one-file report and the Dash app
// (docs/views.md). Data: probe/views/structure3d.py `structure_payload`.
//
// window.probeStructure.mount(root, data) -> a view with
//   .select(layer, head)       the head whose α is drawn (edges, residue colours); a head picked in the view (its
//                              menu, ←/→) also sends a bubbling "probe-head" event, detail {layer, head}
//   .focus(position | null)    the residue whose α from / to the others colours the fold
//   .selectPair(i, j, notify)  highlight a pair of sequence positions (a host's 2D map click); null clears
//   .setTheme("light"|"dark"), .toggle("attention"|"true"|"predicted", on), .setStyle("cartoon"|"trace")
// A pick in 3D (an attention or contact edge, or a residue while another one is focused) selects the pair:
// the root gets data-pair="i,j" and a bubbling "probe-pair" event with detail {i, j, layer, head, labels,
// tokens, source: "3d"}; i is the query (row) and j the key (column) of the host's attention map.
(function () {
    "use strict";
    if (window.probeStructure && window.probeStructure.version >= 1) { return; }

    /** A theme's colours: the background, the fold's grey `base` and orange `ramp` ([r, g, b]), the contacts'
     *  (`truth`, predicted `hit` / `miss`), the selected pair's and the labels'.
     *  @typedef {{background: string, base: number[], ramp: number[][], truth: string, hit: string, miss: string,
     *             pair: string, label: string, labelBack: string}} Theme */
    /** @type {{[name: string]: Theme}} */
    var THEMES = {
        light: {background: "#ffffff", base: [208, 208, 208], ramp: [[253, 208, 162], [253, 174, 107], [217, 72, 1]],
                truth: "#2b6cb0", hit: "#2ca02c", miss: "#9467bd", pair: "#d6246e", label: "#111111",
                labelBack: "#ffffff"},
        // dark base grey: the residue strip writes #111 on it (6.4:1; 110 gave 3.7:1, below WCAG AA)
        dark: {background: "#000000", base: [150, 150, 150], ramp: [[253, 208, 162], [253, 141, 60], [255, 226, 150]],
               truth: "#63a4ff", hit: "#5ad35a", miss: "#c39bff", pair: "#ff5ca8", label: "#f5f5f5",
               labelBack: "#222222"}
    };
    var EDGE = [239, 133, 54];  // provis' attention colour [0.937, 0.522, 0.212]

    // --- core: pure functions (tests call them) ----------------------------------------------------------------

    /** @param {string} base64 @returns {Uint8Array} */
    function bytesOf(base64) {
        var text = atob(base64), bytes = new Uint8Array(text.length);
        for (var i = 0; i < text.length; i++) { bytes[i] = text.charCodeAt(i); }
        return bytes;
    }

    /** @param {number[]} a [r, g, b] @param {number[]} b [r, g, b] @param {number} t in [0, 1]
     *  @returns {number[]} [r, g, b] */
    function mix(a, b, t) {
        return [Math.round(a[0] + (b[0] - a[0]) * t), Math.round(a[1] + (b[1] - a[1]) * t),
                Math.round(a[2] + (b[2] - a[2]) * t)];
    }

    /** @param {number[]} rgb @returns {string} "#rrggbb" */
    function hex(rgb) {
        return "#" + rgb.map(function (v) { return ("0" + Math.max(0, Math.min(255, v)).toString(16)).slice(-2); })
            .join("");
    }

    /** @param {number} value @param {string} theme "light" or "dark" @returns {string} */
    function residueColour(value, theme) {  // value in [0, 1] (uniformScaled: 0 uniform or less): grey -> ramp
        var t = THEMES[theme] || THEMES.light;
        if (!(value > 0)) { return hex(t.base); }
        var v = Math.min(1, value);
        return hex(v < 0.5 ? mix(t.base, t.ramp[1], v * 2) : mix(t.ramp[1], t.ramp[2], (v - 0.5) * 2));
    }

    /** @param {number} weight @param {number} top @returns {string} */
    function edgeColour(weight, top) {  // provis' orange, from light (weak) to dark (the head's strongest pair)
        var t = top > 0 ? Math.min(1, weight / top) : 1;
        return hex(t < 0.5 ? mix([253, 208, 162], EDGE, t * 2) : mix(EDGE, [166, 54, 3], (t - 0.5) * 2));
    }

    /** @param {ArrayLike<number>} alpha [query key] row-major, n a side @param {number} n
     *  @param {number | null | undefined} focus @param {string} direction "from" or "to" @returns {Float32Array} */
    function residueValues(alpha, n, focus, direction) {
        // [n] the fold's colours before scaling: α from `focus` (its row), α to it (its column), or with no focus
        // the attention each position receives, Σ_i α[i, j] / n (hexviz)
        var out = new Float32Array(n), i, j;
        if (focus === null || focus === undefined) {
            for (i = 0; i < n; i++) { for (j = 0; j < n; j++) { out[j] += alpha[i * n + j]; } }
            for (j = 0; j < n; j++) { out[j] /= n; }
        } else if (direction === "to") {
            for (i = 0; i < n; i++) { out[i] = alpha[i * n + focus]; }
        } else {
            for (j = 0; j < n; j++) { out[j] = alpha[focus * n + j]; }
        }
        return out;
    }

    /** @param {ArrayLike<number>} values @returns {{values: Float32Array, top: number}} */
    function scaled(values) {  // values / their max (all zero stays zero), and the max
        var top = 0, i;
        for (i = 0; i < values.length; i++) { if (values[i] > top) { top = values[i]; } }
        var out = new Float32Array(values.length);
        for (i = 0; i < values.length; i++) { out[i] = top > 0 ? values[i] / top : 0; }
        return {values: out, top: top};
    }

    /** @param {ArrayLike<number>} values @param {number} n @returns {{values: Float32Array, top: number}} */
    function uniformScaled(values, n) {
        // the fold's colour scale, the same for every head: α as a multiple of uniform attention (1/n) on a log
        // scale, 0 (the base grey: "nothing here") at or below uniform, 1 where one residue takes all of it (n ×
        // uniform); with the largest multiple. A flat head stays grey; only a peaked one reaches the ramp's end.
        var out = new Float32Array(values.length), top = 0, span = n > 1 ? Math.log(n) : 1, i, ratio;
        for (i = 0; i < values.length; i++) {
            ratio = values[i] * n;
            if (ratio > top) { top = ratio; }
            out[i] = n > 1 && ratio > 1 ? Math.min(1, Math.log(ratio) / span) : 0;
        }
        return {values: out, top: top};
    }

    var core = {bytesOf: bytesOf, residueColour: residueColour, edgeColour: edgeColour,
                residueValues: residueValues, scaled: scaled, uniformScaled: uniformScaled, themes: THEMES};

    // --- the view ------------------------------------------------------------------------------------------------

    /** @template {keyof HTMLElementTagNameMap} K @param {K} tag @param {string | null} [className]
     *  @param {string} [text] @returns {HTMLElementTagNameMap[K]} */
    function element(tag, className, text) {
        var node = document.createElement(tag);
        if (className) { node.className = className; }
        if (text !== undefined) { node.textContent = text; }
        return node;
    }

    /** @param {number[]} xyz @returns {{x: number, y: number, z: number}} */
    function point(xyz) { return {x: xyz[0], y: xyz[1], z: xyz[2]}; }

    /** A protein's 3D view. @constructor @param {HTMLElement} root @param {StructureData} data */
    function Structure(root, data) {
        this.root = root;
        this.data = data;
        this.n = data.n;
        this.theme = data.theme === "dark" ? "dark" : "light";
        /** @type {{[layer: string]: boolean}} */
        this.show = {attention: true, "true": false, predicted: false};
        this.style = "cartoon";
        this.direction = "from";
        /** @type {number | null} */
        this.focused = null;
        /** @type {number[] | null} */
        this.pair = null;
        // set by build() (its elements), start() (the viewer) and draw(): declared here for the type check, no-ops
        /** @type {HTMLSelectElement} */ this.headSelect;
        /** @type {HTMLSelectElement} */ this.directionSelect;
        /** @type {HTMLSelectElement} */ this.styleSelect;
        /** @type {{[layer: string]: HTMLInputElement}} */ this.boxes;
        /** @type {HTMLButtonElement} */ this.themeButton;
        /** @type {HTMLDivElement} */ this.canvasBox;
        /** @type {HTMLDivElement} */ this.caption;
        /** @type {HTMLDivElement} */ this.hoverNote;
        /** @type {HTMLDivElement} */ this.strip;
        /** @type {HTMLSpanElement[]} */ this.spans;
        /** @type {ThreeDmolViewer | null | undefined} */ this.viewer;
        /** @type {object} */ this.model;
        /** @type {{[residue: number]: number}} */ this.positions;  // structure residue index -> sequence position
        /** @type {string | undefined} */ this.styled;  // the key of the fold's last style (draw)
        var bytes = bytesOf(data.maps.data), tops = new Float32Array(bytesOf(data.maps.scale).buffer);
        /** @type {{[layerHead: string]: Float32Array}} */
        this.maps = {};
        var size = this.n * this.n;
        for (var h = 0; h < data.heads.length; h++) {
            var alpha = new Float32Array(size), factor = tops[h] / 255;
            for (var k = 0; k < size; k++) { alpha[k] = bytes[h * size + k] * factor; }
            this.maps[data.heads[h].join(":")] = alpha;
        }
        /** @type {{[pair: string]: boolean}} */
        this.truth = {};
        var truth = this.truth;
        (data.contacts["true"] || []).forEach(function (p) { truth[p[0] + ":" + p[1]] = true; });
        this.build();
        /** @type {number[]} */
        this.selected = data.selected;
        this.index = this.headIndex(data.selected[0], data.selected[1]);
        this.ready = false;  // draw() waits for the first select (one restyle at mount)
        if (!this.start()) { return; }
        this.ready = true;
        this.select(data.selected[0], data.selected[1]);
    }

    Structure.prototype.build = function () {
        var self = this, data = this.data, root = this.root;
        root.textContent = "";
        root.classList.add("probe-structure");
        root.setAttribute("tabindex", "0");
        var title = element("div", "ps-title");
        title.appendChild(element("b", null, data.title || data.model || "structure"));
        title.appendChild(element("span", "ps-note", " · " + data.structure + " chain " + data.chain +
            (data.chains.length > 1 ? " (chains in the file: " + data.chains.join(", ") + ")" : "") + " · " +
            data.n + " residues"));
        root.appendChild(title);
        var controls = element("div", "ps-controls");
        this.headSelect = element("select", "ps-head");
        this.headSelect.title = "the head whose attention is drawn (←/→ in the view)";
        data.heads.forEach(function (key, h) {
            var option = element("option", null, data.head_names[h] + (data.head_notes[h] ? " · " +
                                                                             data.head_notes[h] : ""));
            option.value = String(h);
            self.headSelect.appendChild(option);
        });
        this.headSelect.addEventListener("change", function () {
            var key = data.heads[parseInt(self.headSelect.value, 10)];
            self.select(key[0], key[1], true);
        });
        controls.appendChild(this.headSelect);
        this.directionSelect = element("select", "ps-direction");
        [["from", "colour: α from the focused residue"], ["to", "colour: α to the focused residue"]]
            .forEach(function (item) {
                var option = element("option", null, item[1]);
                option.value = item[0];
                self.directionSelect.appendChild(option);
            });
        this.directionSelect.addEventListener("change", function () {
            self.direction = self.directionSelect.value;
            self.draw();
        });
        controls.appendChild(this.directionSelect);
        this.styleSelect = element("select", "ps-style");
        ["cartoon", "trace"].forEach(function (name) {
            var option = element("option", null, name);
            option.value = name;
            self.styleSelect.appendChild(option);
        });
        this.styleSelect.addEventListener("change", function () { self.setStyle(self.styleSelect.value); });
        controls.appendChild(this.styleSelect);
        this.boxes = {};
        [["attention", "attention edges"], ["true", "true contacts"], ["predicted", "predicted contacts"]]
            .forEach(function (item) {
                var label = element("label", "ps-toggle"), box = element("input");
                box.type = "checkbox";
                box.checked = self.show[item[0]];
                box.setAttribute("data-layer-name", item[0]);
                var missing = item[0] !== "attention" && !data.contacts[item[0]];
                box.disabled = missing;
                label.title = missing ? (item[0] === "true" ? "no structure contacts" :
                                         "this model has no contact regression: no predicted contacts") : "";
                box.addEventListener("change", function () { self.toggle(item[0], box.checked); });
                label.appendChild(box);
                label.appendChild(document.createTextNode(" " + item[1]));
                self.boxes[item[0]] = box;
                controls.appendChild(label);
            });
        var clear = element("button", "ps-clear", "clear");
        clear.title = "release the focused residue and the selected pair (Esc)";
        clear.addEventListener("click", function () { self.focus(null); self.selectPair(null); });
        controls.appendChild(clear);
        this.themeButton = element("button", "ps-theme", "");
        this.themeButton.addEventListener("click", function () {
            self.setTheme(self.theme === "dark" ? "light" : "dark");
        });
        controls.appendChild(this.themeButton);
        root.appendChild(controls);
        this.canvasBox = element("div", "ps-viewer");
        // its size inline too: 3Dmol sizes the canvas from it, on a page without views.css as well
        this.canvasBox.style.cssText = "position: relative; width: 100%; height: " + (data.height || 460) + "px";
        root.appendChild(this.canvasBox);
        this.caption = element("div", "ps-caption");
        root.appendChild(this.caption);
        this.hoverNote = element("div", "ps-note ps-hover", "click a residue to colour the fold by its attention; " +
                                 "click an edge, or a second residue, to select the pair");
        root.appendChild(this.hoverNote);
        this.strip = element("div", "ps-sequence");
        this.spans = data.labels.map(function (label, position) {
            var span = element("span", "ps-residue", data.sequence[position]);
            span.title = label + " · token " + data.token_of_position[position] +
                (data.residue_of_position[position] < 0 ? " · not in the structure" : "");
            span.setAttribute("data-position", String(position));
            self.strip.appendChild(span);
            return span;
        });
        this.strip.addEventListener("click", function (event) {
            var target = /** @type {HTMLElement} */ (event.target);
            var span = target.closest ? target.closest(".ps-residue") : null;
            if (span) { self.residueClicked(parseInt(/** @type {string} */ (span.getAttribute("data-position")), 10)); }
        });
        root.appendChild(this.strip);
        root.addEventListener("keydown", function (event) {
            var target = /** @type {HTMLElement | null} */ (event.target), tag = target && target.tagName;
            if (tag === "SELECT" || tag === "INPUT" || event.altKey || event.ctrlKey || event.metaKey) { return; }
            if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
                event.preventDefault();
                event.stopPropagation();
                var count = data.heads.length, next = (self.index + (event.key === "ArrowRight" ? 1 : -1) + count) %
                    count;
                self.select(data.heads[next][0], data.heads[next][1], true);
            } else if (event.key === "Escape") {
                event.stopPropagation();
                self.focus(null);
                self.selectPair(null);
            }
        });
    };

    /** @returns {boolean} */
    Structure.prototype.start = function () {  // the 3Dmol viewer and the chain; false (with a message) without
        var self = this;
        if (!window.$3Dmol) {
            this.caption.textContent = "the 3D view needs 3Dmol.js, which did not load";
            return false;
        }
        try {
            // no antialiasing: 3Dmol's doubles the canvas, which software WebGL (no GPU) pays for on every render
            this.viewer = window.$3Dmol.createViewer(this.canvasBox, {backgroundColor: THEMES[this.theme].background,
                                                                      antialias: false});
        } catch (error) {
            console.warn("3Dmol.js could not start a viewer:", error);
            this.viewer = null;
        }
        if (!this.viewer) {
            this.caption.textContent = "the 3D view needs WebGL, which this browser does not offer";
            return false;
        }
        this.model = this.viewer.addModel(this.data.pdb, "pdb");
        this.viewer.setClickable({}, true, function (atom) { self.residueClicked(self.positionOf(atom)); });
        this.viewer.setHoverable({}, true, function (atom) {
            var position = self.positionOf(atom);
            if (position !== null) { self.hoverNote.textContent = self.describe(position); }
        }, function () {});
        this.positions = {};  // structure residue index -> sequence position
        this.data.residue_of_position.forEach(function (residue, position) {
            if (residue >= 0) { self.positions[residue] = position; }
        });
        this.viewer.zoomTo();
        this.viewer.zoom(1.25);
        this.setTheme(this.theme);
        return true;
    };

    /** @param {ThreeDmolAtom | null} atom @returns {number | null} its sequence position */
    Structure.prototype.positionOf = function (atom) {
        if (!atom || atom.resi === undefined) { return null; }
        var position = this.positions[atom.resi - 1];
        return position === undefined ? null : position;
    };

    /** @param {number} layer @param {number} head @returns {number} its index in data.heads, or -1 */
    Structure.prototype.headIndex = function (layer, head) {
        for (var h = 0; h < this.data.heads.length; h++) {
            if (this.data.heads[h][0] === layer && this.data.heads[h][1] === head) { return h; }
        }
        return -1;
    };

    /** @returns {Float32Array} the selected head's α [query key] */
    Structure.prototype.alpha = function () { return this.maps[this.data.heads[this.index].join(":")]; };

    /** @param {number} position @returns {string} */
    Structure.prototype.describe = function (position) {
        var alpha = this.alpha(), text = this.data.labels[position];
        if (this.focused !== null && this.focused !== position) {
            text += " · α " + this.data.labels[this.focused] + " → " + this.data.labels[position] + " " +
                alpha[this.focused * this.n + position].toFixed(3) + " · α back " +
                alpha[position * this.n + this.focused].toFixed(3);
        }
        return text;
    };

    /** @param {number} layer @param {number} head @param {boolean} [notify] @returns {boolean} */
    Structure.prototype.select = function (layer, head, notify) {
        var index = this.headIndex(layer, head);
        if (index < 0) { return false; }
        this.index = index;
        this.selected = [layer, head];
        this.root.setAttribute("data-layer", String(layer));
        this.root.setAttribute("data-head", String(head));
        this.headSelect.value = String(index);
        this.draw();
        if (notify) {
            this.root.dispatchEvent(new CustomEvent("probe-head", {bubbles: true, detail: {layer: layer, head: head}}));
        }
        return true;
    };

    /** @param {number | null | undefined} position */
    Structure.prototype.focus = function (position) {
        this.focused = position === null || position === undefined ? null : position;
        if (this.focused === null) { this.root.removeAttribute("data-focus"); }
        else { this.root.setAttribute("data-focus", String(this.focused)); }
        this.draw();
    };

    /** @param {number | null | undefined} position */
    Structure.prototype.residueClicked = function (position) {
        if (position === null || position === undefined) { return; }
        if (this.focused === null || this.focused === position) {
            this.focus(this.focused === position ? null : position);
            return;
        }
        this.selectPair([this.focused, position], true);  // the focus is the query: the pair (focus → clicked)
    };

    /** @param {number[] | number | null} pair [i, j], or i with j the next argument (and notify the third)
     *  @param {boolean | number} [notify] */
    Structure.prototype.selectPair = function (pair, notify) {
        if (typeof pair === "number") {  // selectPair(i, j[, notify]); position 0 is a residue too
            notify = arguments[2];
            pair = [arguments[0], arguments[1]];
        }
        this.pair = pair && pair[0] !== null && pair[0] >= 0 && pair[0] < this.n && pair[1] >= 0 && pair[1] < this.n ?
            [pair[0], pair[1]] : null;
        if (this.pair) { this.root.setAttribute("data-pair", this.pair.join(",")); }
        else { this.root.removeAttribute("data-pair"); }
        this.draw();
        if (notify && this.pair) {
            var data = this.data, i = this.pair[0], j = this.pair[1];
            this.root.dispatchEvent(new CustomEvent("probe-pair", {bubbles: true, detail: {
                i: i, j: j, layer: this.selected[0], head: this.selected[1], labels: [data.labels[i], data.labels[j]],
                tokens: [data.token_of_position[i], data.token_of_position[j]], source: "3d"}}));
        }
    };

    /** @param {string} name "attention", "true" or "predicted" @param {boolean} on */
    Structure.prototype.toggle = function (name, on) {
        if (!(name in this.show)) { return; }
        this.show[name] = !!on && (name === "attention" || !!this.data.contacts[name]);
        this.boxes[name].checked = this.show[name];
        this.draw();
    };

    /** @param {string} style "cartoon" or "trace" */
    Structure.prototype.setStyle = function (style) {
        this.style = style === "trace" ? "trace" : "cartoon";
        this.styleSelect.value = this.style;
        this.draw();
    };

    /** @param {string} theme "light" or "dark" */
    Structure.prototype.setTheme = function (theme) {
        this.theme = theme === "dark" ? "dark" : "light";
        this.root.classList.toggle("ps-dark", this.theme === "dark");
        this.root.setAttribute("data-theme", this.theme);
        this.themeButton.textContent = this.theme === "dark" ? "light" : "dark";
        this.themeButton.title = "switch to the " + this.themeButton.textContent + " theme";
        if (this.viewer) { this.viewer.setBackgroundColor(THEMES[this.theme].background, 1); }
        this.draw();
    };

    /** @returns {{values: Float32Array, top: number, what: string}} */
    Structure.prototype.colours = function () {  // {values [n] 0..1, top (× uniform), what}: the fold's colouring
        var raw = residueValues(this.alpha(), this.n, this.focused, this.direction);
        var result = /** @type {{values: Float32Array, top: number, what: string}} */ (uniformScaled(raw, this.n));
        result.what = this.focused === null ? "attention received (Σ over queries / L, hexviz)" :
            "α " + (this.direction === "to" ? "to " : "from ") + this.data.labels[this.focused];
        return result;
    };

    Structure.prototype.draw = function () {
        if (!this.viewer || !this.ready || this.index === undefined || this.index < 0) { return; }
        var self = this, data = this.data, theme = THEMES[this.theme], viewer = this.viewer;
        var colours = this.colours();
        /** @type {{[residue: number]: string}} */
        var byResidue = {};
        var key = [this.index, this.focused, this.direction, this.theme, this.style].join("|");
        if (key !== this.styled) {  // the fold is restyled only when its colours or style change (costly)
            data.residue_of_position.forEach(function (residue, position) {
                if (residue >= 0) { byResidue[residue + 1] = residueColour(colours.values[position], self.theme); }
            });
            /** @param {ThreeDmolAtom} atom @returns {string} */
            var colourOf = function (atom) { return byResidue[atom.resi] || hex(theme.base); };
            viewer.setStyle({}, this.style === "trace" ?
                {cartoon: {style: "trace", thickness: 0.5, colorfunc: colourOf}} : {cartoon: {colorfunc: colourOf}});
            this.styled = key;
        }
        viewer.removeAllShapes();
        viewer.removeAllLabels();
        var pairs = data.pairs[this.index], top = pairs.length ? pairs[0][2] : 0, drawn = 0;
        // pairs and contacts name only residues with a Cα (structure_payload): ca[i] is not null for them
        var scale = data.params.edge_scale, ca = /** @type {number[][]} */ (data.ca);
        /** @param {number} i @param {number} j */
        function pick(i, j) { return function () { self.selectPair([i, j], true); }; }
        if (this.show["true"]) {
            /** @type {number[][]} */ (data.contacts["true"]).forEach(function (p) {
                viewer.addCylinder({start: point(ca[p[0]]), end: point(ca[p[1]]), radius: 0.08, color: theme.truth,
                                    fromCap: 1, toCap: 1, clickable: true, callback: pick(p[0], p[1])});
            });
        }
        if (this.show.predicted) {
            /** @type {number[][]} */ (data.contacts.predicted).forEach(function (p) {
                var known = data.contacts["true"] !== null, hit = self.truth[p[0] + ":" + p[1]];
                viewer.addCylinder({start: point(ca[p[0]]), end: point(ca[p[1]]), radius: 0.12, dashed: true,
                                    dashLength: 0.6, gapLength: 0.4,
                                    color: !known || hit ? theme.hit : theme.miss, fromCap: 1, toCap: 1,
                                    clickable: true, callback: pick(p[0], p[1])});
            });
        }
        if (this.show.attention) {
            pairs.forEach(function (p) {
                viewer.addCylinder({start: point(ca[p[0]]), end: point(ca[p[1]]), radius: Math.max(0.05, scale * p[2]),
                                    color: edgeColour(p[2], top), fromCap: 1, toCap: 1, clickable: true,
                                    callback: pick(p[0], p[1])});
                drawn += 1;
            });
        }
        if (this.pair) {
            var a = ca[this.pair[0]], b = ca[this.pair[1]];
            /** @type {[number, number[]][]} */ ([[this.pair[0], a], [this.pair[1], b]]).forEach(function (item) {
                if (!item[1]) { return; }
                viewer.addSphere({center: point(item[1]), radius: 1.1, color: theme.pair});
                viewer.addLabel(data.labels[item[0]], {position: point(item[1]), fontColor: theme.label,
                                                       backgroundColor: theme.labelBack, backgroundOpacity: 0.8,
                                                       fontSize: 12, inFront: true});
            });
            if (a && b) { viewer.addCylinder({start: point(a), end: point(b), radius: 0.3, color: theme.pair}); }
        }
        if (this.focused !== null && ca[this.focused]) {
            viewer.addLabel(data.labels[this.focused] + " (focus)", {position: point(ca[this.focused]),
                fontColor: theme.label, backgroundColor: theme.labelBack, backgroundOpacity: 0.8, fontSize: 12,
                inFront: true});
        }
        viewer.render();
        this.spans.forEach(function (span, position) {
            span.style.background = residueColour(colours.values[position], self.theme);
            span.style.color = self.theme === "light" && colours.values[position] > 0.75 ? "#ffffff" : "#111111";
            span.classList.toggle("focus", position === self.focused);
            span.classList.toggle("paired", !!self.pair && (position === self.pair[0] || position === self.pair[1]));
        });
        var alpha = this.alpha(), text = data.head_names[this.index] + " · " + drawn + " attention edges (" +
            (data.params.rule === "mean" ? "mean" : "max") + " of the two directions ≥ " + data.params.min_weight +
            ", at most " + data.params.top + "; radius " + scale + " Å × α)" + " · colour: " + colours.what +
            " as a multiple of uniform attention (1/L), log scale: grey at or below 1×, darkest at L× (all on one" +
            " residue); largest here " + colours.top.toPrecision(3) + "×";
        if (this.pair) {
            var i = this.pair[0], j = this.pair[1];
            text += " · pair " + data.labels[i] + " → " + data.labels[j] + ": α " + alpha[i * this.n + j].toFixed(3) +
                ", back " + alpha[j * this.n + i].toFixed(3) + (data.contacts["true"] ? (this.truth[Math.min(i, j) +
                ":" + Math.max(i, j)] ? " · a true contact" : " · not a true contact (or < 6 apart)") : "");
        }
        this.caption.textContent = text;
        this.root.setAttribute("data-edges", String(drawn));
        this.root.setAttribute("data-ready", "1");
    };

    /** @returns {string | null} a PNG data: URI of the 3D view */
    Structure.prototype.png = function () { return this.viewer ? this.viewer.pngURI() : null; };

    /** @param {HTMLElement} root @param {StructureData} data */
    function mount(root, data) {
        var view = new Structure(root, data);
        root.probeStructure = view;
        return view;
    }

    function mountAll() {  // every <div data-probe-structure="ID"> whose data is in <script id=ID>
        var roots = /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("[data-probe-structure]"));
        roots.forEach(function (root) {
            if (root.probeStructure) { return; }
            var source = document.getElementById(/** @type {string} */ (root.getAttribute("data-probe-structure")));
            if (source) { mount(root, JSON.parse(/** @type {string} */ (source.textContent))); }
        });
    }

    window.probeStructure = {version: 1, core: core, mount: mount, mountAll: mountAll};
})();
