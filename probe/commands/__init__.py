"""One module per `probe` subcommand: `add_parser(subparsers)` and `run(args) -> int`."""
