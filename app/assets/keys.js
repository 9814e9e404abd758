// Keyboard stepping through heads: ←/→ previous/next head, ↑/↓ previous/next layer (not while typing).
document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.isContentEditable)) {
        return;
    }
    var buttons = {ArrowLeft: "head-prev", ArrowRight: "head-next", ArrowUp: "layer-prev", ArrowDown: "layer-next"};
    var button = buttons[event.key] && document.getElementById(buttons[event.key]);
    if (button) {
        event.preventDefault();
        button.click();
    }
});
