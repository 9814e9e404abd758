"""In-context learning on held-out natural text: the per-token loss by position and Olsson et al.'s
in-context-learning (ICL) score.

Olsson et al. (2022, "In-context Learning and Induction Heads") define the ICL score as the loss at token 500
minus the loss at token 50, averaged over dataset examples: negative when later tokens, which have more
context, are predicted better. Our organisms read GAP passages (median 167 tokens with a 1,024-token BPE,
more with the recipes' 512), so the positions are scaled down by the same factor of ten: **the loss at token
120 minus the loss at token 12** of a held-out passage (:data:`ICL_EARLY`, :data:`ICL_LATE`), each averaged
over every held-out passage that has 120 tokens (1,929 of GAP's 1,999 development passages with the
recipes' tokenizer), counted from the
passage's first token (``<bos>`` is context, not a token). Where we differ from Olsson: positions are within
one passage (GAP passages are independent Wikipedia snippets: a later passage gains nothing from an earlier
one), and a passage is one example.

:func:`position_losses` is the measurement (a forward pass per batch of rows); :func:`icl_score` the pure
function of its result.
"""

from __future__ import annotations

import torch

ICL_EARLY = 12  # tokens (1-based, within a passage): Olsson's 50 ...
ICL_LATE = 120  # ... and 500, scaled down ten times to fit GAP passages


@torch.no_grad()
def position_losses(model, rows: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """The loss (nats) of every next-token prediction of every row: `rows` `[row position+1]` (``<bos>`` and
    `position` tokens, :func:`probe.training.text.held_out_rows`) give `[row position]`, column k − 1 the loss
    at the row's token k (predicted from ``<bos>`` and tokens 1 … k − 1).

    Parameters
    ----------
    model
        A causal LM (transformers): ``model(input_ids=...)`` returns ``.logits`` `[batch position vocab]`.
    rows : torch.Tensor
        `[row position+1]` token ids, each row starting with ``<bos>``.
    batch_size : int
        Rows per forward pass.

    Returns
    -------
    torch.Tensor
        `[row position]` float64 losses.
    """
    was_training = model.training
    model.eval()
    parts = []
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]  # [batch position+1]
            logits = model(input_ids=batch[:, :-1]).logits  # [batch position vocab]
            loss = torch.nn.functional.cross_entropy(logits.double().transpose(1, 2), batch[:, 1:],
                                                     reduction="none")  # [batch position]
            parts.append(loss)
    finally:
        model.train(was_training)
    return torch.cat(parts) if parts else torch.empty(0, rows.shape[1] - 1, dtype=torch.float64)


def icl_score(losses: torch.Tensor, early: int = ICL_EARLY, late: int = ICL_LATE) -> float:
    """Olsson et al.'s in-context-learning score: the mean loss at token `late` minus the mean loss at token
    `early` (1-based tokens; `losses` `[row position]` as :func:`position_losses` gives). Negative: later
    tokens are predicted better.

    Raises
    ------
    ValueError
        `early` ≥ `late`, or a position outside the rows.
    """
    if not 1 <= early < late <= losses.shape[1]:
        raise ValueError(f"ICL positions must satisfy 1 <= early < late <= {losses.shape[1]}, got {early}, "
                         f"{late}")
    return float(losses[:, late - 1].mean() - losses[:, early - 1].mean())


def icl_standard_error(losses: torch.Tensor, early: int = ICL_EARLY, late: int = ICL_LATE) -> float:
    """The standard error of :func:`icl_score` over rows: the standard deviation of each row's loss at token
    `late` minus its loss at token `early`, over √rows (NaN for fewer than two rows)."""
    if len(losses) < 2:
        return float("nan")
    difference = losses[:, late - 1] - losses[:, early - 1]  # [row]
    return float(difference.std() / len(difference) ** 0.5)


__all__ = ["ICL_EARLY", "ICL_LATE", "icl_score", "icl_standard_error", "position_losses"]
