"""The glossary popover: what every number in the page means (score, chance, effect, q-value, the label rule
with its numbers, output share and sinks, ablation, the grid's colours and badges, why a protein cell is
unknown). The numbers of the rule are read from probe.heads.label.LabelConfig, so the text follows the
library."""

from __future__ import annotations

import dash_mantine_components as dmc
from dash import html

from probe.heads.label import LabelConfig
from probe.views import unknowns

from .. import ids
from ..panel import Panel


def entries() -> list[tuple[str, str]]:
    """(term, definition) pairs shown in the glossary."""
    config = LabelConfig()
    level = f"{config.confidence:.0%}"
    return [
        ("score", "the mean share of a head's attention that lands on its head type's targets (previous "
                  "token, an earlier copy's successor, …), over the probe examples; 0–1, drawn on the fixed "
                  "0–1 scale."),
        ("chance",
         "the score a uniform head would get on the same examples (|targets| / visible keys per row)."),
        ("interval", f"[ci_low, ci_high]: a {level} clustered bootstrap interval of the score "
                     f"({config.n_bootstrap} resamples over examples)."),
        ("effect", "score − chance; for coreference, the antecedent accuracy gain over the best baseline."),
        ("p-value, q-value", "the one-sided test that the effect exceeds the minimum effect, and its "
                             "Benjamini–Hochberg q-value over every head and type of the model."),
        ("label rule (✓)", f"a head is labelled when q ≤ {config.fdr:g} for H0: effect ≤ "
                           f"{config.min_effect:g} (mass types) or accuracy gain ≤ "
                           f"{config.min_accuracy_gain:g} (coreference, which must also put more attention "
                           "on the antecedent than chance); with untrained twins as a control, the score "
                           "must also beat their 99th percentile (untrained_p99)."),
        ("grey cell", "not labelled. Hover says why: no score, untestable (one bootstrap cluster), below the "
                      "untrained twins, attention to the antecedent not above chance, below the minimum "
                      "effect, or q above the FDR level. Grey is not 'at chance': a score far above chance "
                      "can be grey when its effect is below the minimum."),
        ("✓", "labelled: the head passed the label rule."),
        ("offset", "fixed_offset heads: the relative position d the head attends to (j = i + d)."),
        ("ablation", "ablation_effect: the rise in loss on the type's probes when the head is zeroed; "
                     "ablation_z: that rise in standard deviations of random same-layer heads."),
        ("group effect", "group_effect / group_z: the same for all labelled heads of a type ablated "
                         "together, against random groups of the same size."),
        ("output share", "output_share: the share of a head's output norm ‖Σ α·v·W_O‖ that comes from its "
                         "targets (Kobayashi et al. 2020): weight a head puts on a token can carry little "
                         "output."),
        ("role", "what a label's weight is worth. First-token and delimiter labels (where heads park "
                 "attention): 'sink' when output_share < 0.1 — attended, little moved — else 'function'. "
                 "Every other type (coreference, bracket, sentence start, induction, positional) against its "
                 "own chance: 'function' when output_share > chance, else 'inert'; induction functions are "
                 "'copying' / 'suppressing' by the copying score (±0.1)."),
        ("coreference accuracy", "accuracy: the pronoun's most-attended of the two marked names is the "
                                 "antecedent (chance 50 %); clark_accuracy: its most-attended word of all "
                                 "(Clark et al. 2019's argmax); p_above_chance: the test that the antecedent "
                                 "gets more attention than a uniform head gives it."),
        ("tl_score", "TransformerLens' detect_head score (Σ α·D / Σ α with its own detection pattern)."),
        ("untrained_p99", "the 99th percentile of the type's statistic (accuracy for coreference, else the "
                          "score) over every head of K untrained twins (the model's architecture with random "
                          "weights, --control untrained:K); a label must be above it too. Shown beside "
                          "chance as 'twins p99'; 'not run' when the labels were made without twins (the "
                          "default: they beat chance only)."),
        ("dominant offset",
         "the most common argmax j − i over the rows of the shown head, and in how many rows."),
        ("α", "an attention weight: row i (the query) is a distribution over keys j."),
        ("protein heads", "enrichment: the head's share on a feature over its base rate; p/q: a binomial "
                          "test and its BH q-value; 'unknown' where the feature is not defined (no ligand)."),
        *unknowns.glossary(),  # which measure needs which annotation, and how to supply it
    ]


def glossary_button() -> dmc.Popover:
    items = [html.Div([html.Dt(term), html.Dd(text)]) for term, text in entries()]
    return dmc.Popover(width=460, position="right-start", withArrow=True, shadow="md", children=[
        dmc.PopoverTarget(dmc.Button("Glossary: what the numbers mean", id=ids.GLOSSARY + "-button",
                                     variant="default", size="xs")),
        dmc.PopoverDropdown(html.Dl(items, id=ids.GLOSSARY, className="glossary")),
    ])


def register(app, service) -> None:
    """The glossary has no callbacks (the popover opens in the browser)."""


# its button sits in the sidebar (glossary_button, placed by the page panel)
PANEL = Panel("glossary", register=register)
