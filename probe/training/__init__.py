"""Training the model organisms: the recipes (:mod:`~probe.training.organisms`), their seeded training data
built from the probe sets' vocabularies and templates (:mod:`~probe.training.data`), the natural text, its
learnt tokenizer and held-out rows (:mod:`~probe.training.text`), the in-context-learning score
(:mod:`~probe.training.incontext`), the training loop (:mod:`~probe.training.train`) and what an organism
ships besides its weights — card.json, MODEL_CARD.md and its label table labels.csv
(:mod:`~probe.training.cards`).

What belongs here: code that makes or relabels an organism. It sits above heads (the data uses the probe sets,
the cards run the head classifier) and below runs and commands; the command line is ``probe train``
(:mod:`probe.commands.train`). The catalogue and the shipped weights are :mod:`probe.zoo`, which imports
nothing of this package.

Examples
--------
>>> from probe.training.organisms import ORGANISMS
>>> sorted(ORGANISMS)  # the recipes of `probe train NAME`
['brackets', 'coreference', 'implicit-causality', 'induction', 'natural-text', 'natural-text-1layer',
     'positional', 'retrieval', 'sentences', 'stdlib-code', 'stdlib-code-1layer']
"""
