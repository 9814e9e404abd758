"""`probe app`: the dashboard — head atlas, attention explorer, proteins next to contact maps."""

from __future__ import annotations

import argparse
import sys

from probe.errors import ProbeError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "app", help="open the dashboard (head atlas, attention explorer, protein contact maps)",
        description="Serve the Dash dashboard. With no --model it opens offline on the bundled model organisms.",
    )
    parser.add_argument("--model", action="append", default=None,
                        help="hub id, local directory or zoo:NAME; repeat for several (default: the model organisms)")
    parser.add_argument("--labels", help="labels table written by `probe label` (.csv, .parquet, .json)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    parser.add_argument("--max-tokens", type=int, default=1024, help="longest explorer input in tokens (default 1024)")
    parser.add_argument("--max-residues", type=int, default=1022, help="longest protein (default 1022)")
    parser.add_argument("--upload-mb", type=float, default=5.0, help="largest upload in MiB (default 5)")
    return parser


def run(args: argparse.Namespace) -> int:
    from app import create_app
    from app.service import AppConfig

    if not 0 < args.port < 65536:
        raise ProbeError(f"--port {args.port} is not a port number: use 1..65535")
    for flag, value in (("--max-tokens", args.max_tokens), ("--max-residues", args.max_residues),
                        ("--upload-mb", args.upload_mb)):
        if value <= 0:
            raise ProbeError(f"{flag} must be positive")
    config = AppConfig(models=tuple(args.model or ()), labels=args.labels, device=args.device,
                       max_tokens=args.max_tokens, max_residues=args.max_residues,
                       upload_bytes=int(args.upload_mb * 2**20))
    print("probe app: loading models…", file=sys.stderr)
    dash_app = create_app(config)
    service = dash_app.probe_service
    if not args.model and not args.labels:  # the bundled organisms are tiny: label them now, so the atlas fills at once
        for spec in service.specs:
            if service.model(spec).kind != "protein_mlm":
                service.start_labelling(spec)
    if args.host not in LOOPBACK:
        print(f"probe app: warning: binding {args.host} makes the dashboard reachable from other machines; it has "
              "no authentication", file=sys.stderr)
    print(f"probe app: serving {', '.join(service.specs)} at http://{args.host}:{args.port} "
          "(Ctrl-C stops)", file=sys.stderr)
    try:
        dash_app.run(host=args.host, port=args.port, debug=False, threaded=True)
    except OSError as error:
        raise ProbeError(f"cannot serve on {args.host}:{args.port} ({error.strerror or error}); "
                         "pass another --port") from None
    return 0
