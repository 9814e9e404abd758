// Token view (CircuitsVis-style token reading): hovering a token colours the text by the selected head's attention
// from/to it; a click pins that token (hovering then changes nothing) and a second click on it unpins.
(function () {
    var pinned = null, timer = null;

    function tokenOf(event) {
        var target = event.target;
        return target && target.closest ? target.closest("#explorer-tokens .token") : null;
    }

    function focus(index) {
        if (window.dash_clientside && window.dash_clientside.set_props) {
            window.dash_clientside.set_props("token-focus", {data: {index: index}});
        }
    }

    document.addEventListener("click", function (event) {
        var token = tokenOf(event);
        if (!token) { return; }
        var index = parseInt(token.getAttribute("data-index"), 10);
        clearTimeout(timer);
        pinned = pinned === index ? null : index;
        focus(index);
    });

    document.addEventListener("mouseover", function (event) {
        var token = tokenOf(event);
        if (!token || pinned !== null) { return; }
        var index = parseInt(token.getAttribute("data-index"), 10);
        clearTimeout(timer);
        timer = setTimeout(function () { focus(index); }, 150);  // not one request per token swept over
    });
})();
