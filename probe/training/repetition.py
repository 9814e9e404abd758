"""How much a training text repeats itself within a context window: what decides whether induction heads can
form on it (issue 54).

Aoyama, Wilcox & Schneider (2025) find that induction heads form only on text whose bigrams repeat often and
reliably enough; work on toy transformers reports them forming once ~10 % of tokens sit inside repeated
sequences. Our operationalisation of the three quantities (not the papers' code), counted in windows of
`context` tokens cut from each text in order (the last, shorter window of a text included), a token being
one next-token prediction inside its window:

* **bigram repetition frequency** — the share of tokens whose bigram (previous token, token) already occurred
  earlier in the window;
* **reliability** — among tokens whose previous token occurred earlier in the window, the share equal to the
  token that followed that previous token's most recent earlier occurrence (what a one-token-prefix
  induction head predicts);
* **in repeated spans** — the share of tokens that continue an earlier occurrence of their two preceding
  tokens (the trigram ending in the token occurred earlier in the window).

Examples
--------
>>> from probe.training.repetition import repetition
>>> figures = repetition([[1, 2, 3, 1, 2, 3]], context=6)
>>> figures.tokens, figures.bigram_frequency, figures.reliability, figures.repeated_spans
(5, 0.4, 1.0, 0.2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Repetition:
    """The repetition figures of a text at one context length (shares in [0, 1]; NaN where nothing counts).

    Attributes
    ----------
    context : int
        The window, in tokens.
    tokens : int
        Next-token predictions counted (each window of n tokens gives n − 1).
    bigram_frequency, reliability, repeated_spans : float
        The three shares of the module docstring.
    """

    context: int
    tokens: int
    bigram_frequency: float
    reliability: float
    repeated_spans: float

    def as_dict(self) -> dict:
        """The figures rounded to 4 places, for a card."""
        return {"context": self.context, "tokens": self.tokens,
                "bigram_repetition_frequency": round(self.bigram_frequency, 4),
                "reliability": round(self.reliability, 4), "in_repeated_spans": round(self.repeated_spans, 4)}


def repetition(texts: Sequence[Sequence[int]], context: int) -> Repetition:
    """The repetition figures of token-id `texts` in windows of `context` tokens.

    Parameters
    ----------
    texts
        Token ids of each text (no ``<bos>``), e.g. :func:`probe.training.text.encode_passages`.
    context
        Window length in tokens (the training context C); at least 2.
    """
    if context < 2:
        raise ValueError(f"context must be at least 2 tokens, got {context}")
    counted = repeated_bigram = seen_previous = reliable = repeated_trigram = 0
    for ids in texts:
        for start in range(0, len(ids), context):
            window = ids[start:start + context]
            last_after: dict[int, int] = {}  # token -> the token that followed its most recent occurrence
            bigrams: set[tuple[int, int]] = set()
            trigrams: set[tuple[int, int, int]] = set()
            for i in range(1, len(window)):
                previous, token = window[i - 1], window[i]
                counted += 1
                repeated_bigram += (previous, token) in bigrams
                if previous in last_after:
                    seen_previous += 1
                    reliable += last_after[previous] == token
                if i >= 2:
                    trigram = (window[i - 2], previous, token)
                    repeated_trigram += trigram in trigrams
                    trigrams.add(trigram)
                bigrams.add((previous, token))
                last_after[previous] = token
    nan = float("nan")
    return Repetition(context=context, tokens=counted,
                      bigram_frequency=repeated_bigram / counted if counted else nan,
                      reliability=reliable / seen_previous if seen_previous else nan,
                      repeated_spans=repeated_trigram / counted if counted else nan)


__all__ = ["Repetition", "repetition"]
