// The 3D structure view in the dashboard: a bridge between Dash's stores and probe/views/assets/structure.js
// (served with 3Dmol.js by the app's own route, probe.views.bundle.STRUCTURE_URLS; nothing from a CDN).
//
// window.dash_clientside.probeStructure.render(payload, dark, pair, selected) is the clientside callback of
// app/panels/structure3d.py: it mounts the view of `payload` (probe.views.structure3d.structure_payload) in the
// callback's container once per payload, then follows the app: the theme switch, the residue pair marked in the
// 2D maps ({i, j}, highlighted without an echo) and the selected head ({layer, head}). The other way, a pair
// picked in 3D is written to the container's data-pair-store (the maps' pair store) and a head picked in the
// view to its data-selected-store, with dash_clientside.set_props. Without the view's scripts (an app that does
// not serve them) it says so in the container and does nothing else.
(function () {
    "use strict";
    window.dash_clientside = window.dash_clientside || {};

    /** @param {StructureData} payload @returns {string} */
    function keyOf(payload) {  // one mount per protein and heads: a new payload remounts
        return [payload.model, payload.structure, payload.chain, payload.sequence,
                JSON.stringify(payload.heads)].join("|");
    }

    /** @param {HTMLElement} root */
    function listen(root) {
        if (root.probeStructureBridge) { return; }
        root.probeStructureBridge = true;
        root.addEventListener("probe-pair", function (event) {
            var store = root.getAttribute("data-pair-store"), set = window.dash_clientside.set_props;
            var detail = /** @type {CustomEvent<{i: number, j: number}>} */ (event).detail;
            if (store && set) { set(store, {data: {i: detail.i, j: detail.j}}); }
        });
        root.addEventListener("probe-head", function (event) {
            var store = root.getAttribute("data-selected-store"), set = window.dash_clientside.set_props;
            var detail = /** @type {CustomEvent<HeadRef>} */ (event).detail;
            if (store && set) { set(store, {data: {layer: detail.layer, head: detail.head}}); }
        });
    }

    /** @param {StructureData | null} payload @param {boolean} dark @param {{i?: number, j?: number} | null} pair
     *  @param {{layer?: number, head?: number} | null} selected @returns {string | object | undefined} */
    function render(payload, dark, pair, selected) {
        var context = window.dash_clientside.callback_context, output = context && context.outputs_list;
        var id = output && output.id ? String(output.id).replace(/-drawn$/, "") : null;
        var root = id ? document.getElementById(id) : null;
        if (!root) { return window.dash_clientside.no_update; }
        if (!payload) {
            root.textContent = "";
            root.probeStructure = null;
            root.removeAttribute("data-payload-key");
            return "";
        }
        if (!window.probeStructure || !window.$3Dmol) {
            root.textContent = "the 3D view's scripts (3Dmol.js, structure.js) were not loaded by this page";
            return "missing";
        }
        var key = keyOf(payload);
        if (!root.probeStructure || root.getAttribute("data-payload-key") !== key) {
            root.probeStructure = null;
            window.probeStructure.mount(root, payload);
            root.setAttribute("data-payload-key", key);
            listen(root);
        }
        var view = root.probeStructure;
        if (!view || !view.viewer) { return "no viewer"; }
        var theme = dark ? "dark" : "light";
        if (view.theme !== theme) { view.setTheme(theme); }
        if (selected && typeof selected.layer === "number" && typeof selected.head === "number" &&
            (view.selected[0] !== selected.layer || view.selected[1] !== selected.head)) {
            view.select(selected.layer, selected.head);  // a head the payload lacks keeps the one shown
        }
        var wanted = pair && typeof pair.i === "number" && typeof pair.j === "number" ? [pair.i, pair.j] : null;
        var shown = view.pair;
        if (String(wanted) !== String(shown)) { view.selectPair(wanted); }
        return key;
    }

    window.dash_clientside.probeStructure = Object.assign({}, window.dash_clientside.probeStructure,
                                                          {render: render, keyOf: keyOf});
})();
