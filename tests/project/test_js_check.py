"""The JavaScript check is wired: ESLint and tsc --checkJs are pinned, cover every script the browser runs,
and scripts/test.sh runs them (js/README.md). The check itself runs in scripts/test.sh (tsc reads the DOM's
types: ~15 s of CPU, too slow for the default suite); the scripts' behaviour is tested in Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "js"
VENDORED = {"3Dmol-min.js"}  # a third party's minified build (its licence beside it): not ours to lint
SCRIPTS = sorted(path for path in [*(ROOT / "probe" / "views" / "assets").glob("*.js"),
                                   *(ROOT / "app" / "assets").glob("*.js")] if path.name not in VENDORED)


def _json_with_comments(path: Path) -> dict:
    """tsconfig.json allows // comments (on their own lines here)."""
    lines = path.read_text().splitlines()
    return json.loads("\n".join(line for line in lines if not line.strip().startswith("//")))


def test_the_tools_are_pinned_and_locked():
    package = json.loads((JS / "package.json").read_text())
    tools = package["devDependencies"]
    assert {"eslint", "typescript"} <= set(tools)
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", version) for version in tools.values()), tools  # exact pins
    lock = json.loads((JS / "package-lock.json").read_text())
    for name, version in tools.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    assert package["scripts"]["check"] == "npm run lint && npm run types"
    assert "--max-warnings 0" in package["scripts"]["lint"]


def test_every_browser_script_is_linted_and_type_checked():
    assert len(SCRIPTS) >= 4  # views.js, explorer.js, keys.js, upload.js
    config = _json_with_comments(JS / "tsconfig.json")
    options = config["compilerOptions"]
    assert options["checkJs"] and options["noEmit"]
    assert options["strict"] is True  # noImplicitAny, strictNullChecks, …: JSDoc types (js/README.md)
    checked = {(JS / name).resolve() for name in config["files"]}
    missing = [str(path.relative_to(ROOT)) for path in SCRIPTS if path.resolve() not in checked]
    assert not missing, f"add {missing} to js/tsconfig.json's files"
    eslint = (JS / "eslint.config.mjs").read_text()
    assert '"probe/views/assets/**/*.js"' in eslint and '"app/assets/**/*.js"' in eslint
    assert all(name in eslint for name in VENDORED)  # ignored by ESLint, by name
    lint = json.loads((JS / "package.json").read_text())["scripts"]["lint"]
    assert "probe/views/assets" in lint and "app/assets" in lint


def test_the_test_script_installs_and_runs_the_check():
    script = (ROOT / "scripts" / "test.sh").read_text()
    install, check = script.index("npm ci --prefix js"), script.index("npm run --prefix js --silent check")
    assert install < check < script.index("python -m pytest")
    assert "set -euo pipefail" in script  # a failing check fails the run
    assert re.search(r"^node_modules/$", (ROOT / ".gitignore").read_text(), re.MULTILINE)
