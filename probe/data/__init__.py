"""Data shipped with the package (see each folder's NOTICE.md for its source and licence)."""
