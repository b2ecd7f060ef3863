"""The z-loss study (issue 29), in one place: ``grid.py`` (the plain model against z-loss 1e-4 and 1e-3 at d128 without weight decay, at rates 0.17 and 0.3, seeds 500-509), ``plan.py`` (its power plan), ``rules.py`` (its claims, committed before it runs) and ``report.py``.

It follows the z-loss probe (``experiments/studies/zloss_probe/``), which found where this
shape's output logits run away (d128, weight decay 0, rate 0.3) and, in one 2-seed look, that
z-loss 1e-4 did not hold them. This study judges Wortsman et al.'s claim there on new seeds.
The account is ``docs/study.md`` ("The z-loss study").
"""

# The report's opening line (``studies.design``): how its rules relate to its data.
DESIGN = ("**Confirmatory study.** Its grid, seeds (500-509, none an earlier study used), power "
          "plan and rules were committed before it ran, after the exploratory z-loss probe "
          "(``docs/studies/zloss_probe-cpu``) that chose its setting.")
