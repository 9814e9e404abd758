"""The command line: one module per `probe` subcommand, each named in :data:`SUBCOMMANDS` (the one list: the
parser of :mod:`probe.cli` registers them from it, the CLI reference and the tests walk it) with
`add_parser(subparsers)` and `run(args) -> int`, plus the shared flags and checks
(:mod:`~probe.commands.common`). Each imports only the standard library and light probe modules at its top and
its library inside `run()`, so `--help` and bad arguments answer before torch is imported.

What belongs here: argparse, checking flags into library values (a ``LabelConfig``, an executor), and
printing. The work itself is the library's (batch work through :func:`probe.runs.runner.run`). This is the top
layer: nothing in the package imports it but :mod:`probe.cli`.

Examples
--------
>>> from probe.cli import main
>>> main(["card", "--model", "zoo:induction"])  # prints the card; returns the exit code
model                      zoo:induction
model type                 llama
attention                  MHA (multi-head)
layers                     2
hidden size                64
heads                      4 query · 4 key/value
head dim                   16
positions                  rotary (RoPE, θ = 10000)
sliding window             none
parameters in attention    32,768
KV cache values per token  256
KV cache fp16              per token: 512 B · 4K: 2 MiB · 32K: 16 MiB · 128K: 64 MiB
KV cache bf16              per token: 512 B · 4K: 2 MiB · 32K: 16 MiB · 128K: 64 MiB
KV cache fp8               per token: 256 B · 4K: 1 MiB · 32K: 8 MiB · 128K: 32 MiB
training domain            unknown
0
"""

# Each subcommand lives in probe/commands/<name>.py with `add_parser(subparsers)` and `run(args) -> int`, in
# the order `probe --help` lists them; a new subcommand is a module and its name here
# (tests/commands/test_cli_fast.py checks that every module with add_parser is named here).
SUBCOMMANDS = ("capture", "label", "contacts", "app", "card", "profile", "train", "report", "history",
               "circuit")
