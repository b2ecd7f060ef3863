"""The muTransfer width ladder (issue 29), in one place: ``grid.py`` (sp, muP and sp with qk-LayerNorm across widths 32 to 256, on the base stage's tuned multipliers and unseen seeds), ``rules.py`` (its claims and the rates for andrea120m, committed before it runs) and ``report.py``.

It follows the muP base stage (``experiments/studies/mup_base/``): the multipliers its rule
chose at the base width are read from ``results/mup_base-cpu/results.json`` and carried
unchanged to every width, under sp and muP alike (at the base width the two are then one
model). The account is ``docs/study.md`` ("The muTransfer ladder").
"""

DESIGN = ("**Confirmatory ladder.** Its grid, seeds (none an earlier study used) and rules "
          "were committed before it ran, after the base stage whose choice it carries; the "
          "earlier proxies ladder (``docs/studies/proxies-cpu``) is exploratory for it.")
