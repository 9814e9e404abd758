#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, Chromium for the browser tests, the JavaScript check (ESLint
# and tsc --checkJs, pinned in js/package-lock.json), the documentation site (mkdocs build --strict: a broken link,
# a docstring that disagrees with its signature or a stale CLI section fails), then pytest (notebooks and the
# docstring examples included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test,ray,docs  # one resolution: the test, ray (scale-out tests, kaleido) and docs extras
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || {
        echo "could not install chromium and chromium-driver (needs root and Debian's registry)" >&2; exit 1; }
fi
if ! command -v npm >/dev/null; then  # the JavaScript check (Debian's nodejs 18 runs the pinned tools)
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null) || {
        echo "could not install nodejs and npm (needs root and Debian's registry)" >&2; exit 1; }
fi
if ! command -v c++ >/dev/null; then  # the fused CPU tile kernel (probe/engine/tiles.cpp) is built and tested
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq g++ >/dev/null) || {
        echo "could not install g++ (needs root and Debian's registry)" >&2; exit 1; }
fi
. .venv/bin/activate
python -m ruff check .  # line length 110, imports sorted, pyflakes (pyproject.toml [tool.ruff])
npm ci --prefix js --no-audit --no-fund --loglevel=error  # ESLint and TypeScript at the lock file's versions
npm run --prefix js --silent check  # ESLint, then tsc --checkJs: views.js and app/assets/*.js (js/README.md)
NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --site-dir site  # not --quiet: it hides warnings from --strict
python -m pytest -q "$@"
