"""The architecture coverage harness: tiny random models of every model type in :mod:`.catalogue`, run through
the capture engine and compared with eager attention and with the model's own outputs (:mod:`.harness`);
``scripts/architectures.py`` writes ``docs/architectures.md`` from it and ``tests/engine/test_coverage.py``
checks it."""
