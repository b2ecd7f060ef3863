"""The norm x MLP study, in one place: ``grid.py`` (what is trained: norm placement x warmup over a rate grid, the MLP ratio, init and depth arms), ``rules.py`` (its claims), ``report.py`` (its table and figures).

Committed: ``docs/results/norm_mlp-cpu/`` and ``docs/results/norm_mlp-smoke/``; the account
is ``docs/study.md``.
"""
