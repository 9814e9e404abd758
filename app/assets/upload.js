// Uploads the browser refuses (over the size limit, or a type the box does not take) are never sent to the server;
// without this script they would vanish silently. Say why, in one line, in the protein panel's error line (the line
// saying which protein the maps show stays).
// The server resets the box's contents after each upload, so the same file can be uploaded again.
(function () {
    /** @param {FileList | null} files */
    function check(files) {
        var box = document.getElementById("protein-upload-box");
        if (!box || !files || !files.length || !window.dash_clientside || !window.dash_clientside.set_props) { return; }
        var file = files[0];
        var limit = parseInt(/** @type {string} */ (box.getAttribute("data-max-bytes")), 10);
        var accept = (box.getAttribute("data-accept") || "").split(",");
        var name = (file.name || "").toLowerCase();
        var message = null;
        if (accept.length && !accept.some(function (ext) { return ext && name.endsWith(ext); })) {
            message = file.name + ": not a structure or FASTA file; upload .pdb, .ent, .cif, .mmcif, .fasta, .fa, " +
                ".faa, .txt or .seq";
        } else if (limit && file.size > limit) {
            message = file.name + " is " + (file.size / 1048576).toFixed(1) + " MiB; the limit is " +
                (limit / 1048576).toFixed(1) + " MiB (probe app --upload-mb)";
        }
        if (message) {
            window.dash_clientside.set_props("protein-error", {children: message});
        }
    }

    document.addEventListener("change", function (event) {
        var target = /** @type {HTMLInputElement} */ (event.target);
        if (target && target.type === "file" && target.closest && target.closest("#protein-upload-box")) {
            check(target.files);
            // Forget the chosen file once the upload box has read it, so choosing the same file again is a change.
            setTimeout(function () { target.value = ""; }, 200);
        }
    }, true);
    document.addEventListener("drop", function (event) {
        var target = /** @type {HTMLElement} */ (event.target);
        if (target && target.closest && target.closest("#protein-upload-box") &&
            event.dataTransfer) {
            check(event.dataTransfer.files);
        }
    }, true);
})();
