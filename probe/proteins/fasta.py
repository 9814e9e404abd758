"""FASTA parsing shared by the CLI (`probe contacts --fasta`) and the app: one-line errors for what a user can
fix."""

from __future__ import annotations

from pathlib import Path

from probe.errors import ProbeError


def parse_fasta(text: str, source: str = "the FASTA text", allow_bare: bool = True) -> list[tuple[str, str]]:
    """[(id, sequence)] of FASTA text: the id is the first word after '>' (record<N> when empty), sequence
    lines are joined with whitespace removed; ';' lines and blank lines are skipped. With `allow_bare`, a bare
    sequence without any '>' header is one record named "sequence". Not validated as amino acids (see
    probe.models.clean_protein)."""
    records: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    if allow_bare and not any(line.lstrip().startswith(">") for line in lines):
        sequence = "".join("".join(lines).split())
        if not sequence:
            raise ProbeError(f"{source} holds no FASTA records")
        return [("sequence", sequence)]
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        if line.startswith(">"):
            words = line[1:].split()
            records.append((words[0] if words else f"record{len(records) + 1}", []))
        elif not records:
            raise ProbeError(f"{source} line {number}: sequence before the first '>' header; is this a FASTA "
                             "file?")
        else:
            records[-1][1].append("".join(line.split()))
    result = []
    for name, parts in records:
        if not "".join(parts):
            raise ProbeError(f"{source}: record {name} has an empty sequence")
        result.append((name, "".join(parts)))
    return result


def read_fasta(path: str | Path) -> list[tuple[str, str]]:
    """[(id, sequence)] of a FASTA file (UTF-8 or ASCII); one-line errors for a missing, binary, non-UTF-8,
    empty or malformed file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ProbeError(f"FASTA file {path} does not exist" if not file.exists()
                         else f"{path} is not a file")
    try:
        data = file.read_bytes()
    except OSError as error:
        raise ProbeError(f"cannot read {path}: {error.strerror or error}") from None
    if b"\x00" in data:
        raise ProbeError(f"{path} is a binary file, not FASTA text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ProbeError(f"{path} is not UTF-8 text (byte {error.start + 1} cannot be decoded); save it as "
                         "UTF-8 or ASCII FASTA") from None
    result = parse_fasta(text, str(path), allow_bare=False)
    if not result:
        raise ProbeError(f"{path} holds no FASTA records")
    return result
