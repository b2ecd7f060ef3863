"""The norm x MLP study, in one place: ``grid.py`` (what is trained: norm placement x warmup over a rate grid, the MLP ratio, init and depth arms), ``rules.py`` (its claims), ``report.py`` (its table and figures).

Committed: ``results/norm_mlp-cpu/`` and ``results/norm_mlp-smoke/`` (the cells), reported in
``docs/studies/norm_mlp-cpu/`` and ``docs/studies/norm_mlp-smoke/``; the account
is ``docs/study.md``.
"""

# The report's opening line (``studies.design``): how its rules relate to its data.
DESIGN = ("**Exploratory study.** Its rules were revised after its data (the rules line below "
          "names what changed since the run), so its verdicts are hypotheses, not tests: the "
          "confirmatory study (`experiments/studies/norm_mlp_confirm/`, unseen seeds, one rate "
          "grid, rules and power plan committed before its run) tests them.")
