"""The z-loss probe, in one place: ``grid.py`` (weight decay x z-loss x rate at two widths of the muTransfer ladder's shape), ``rules.py`` (where the output softmax's log Z leaves its start, fixed before the probe ran) and ``report.py`` (log Z per setting and rate).

Issue 29: a z-loss rule must be judged where the output logits do diverge, and in the
committed proxies study they did not (log Z between 5.7 and 6.9 at every rate and width,
weight decay 0.1). Wortsman et al. 2023 (section 3.2) see log Z run far from a uniform softmax's
without weight decay at high rates. This probe finds that setting, if this shape has one,
before any z-loss rule is fixed; the rule and its confirmatory run come after, on other
seeds. The account is ``docs/study.md``.
"""

# The report's opening line (``studies.design``): how its rule relates to its data.
DESIGN = ("**Exploratory probe.** Its grid, seeds (400-401, none an earlier study used) and "
          "its finding rule were committed before it ran; it judges no claim of the literature. "
          "It says where a z-loss claim can be judged; that claim's rule is fixed after it and "
          "runs on other seeds.")
