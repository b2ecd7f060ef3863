"""The small-scale proxies study, in one place: ``grid.py`` (a width ladder of five arms over one grid of rates), ``rules.py`` (its claims and the predicted rate for andrea120m), ``report.py`` (its tables and figures).

Committed: ``results/proxies-cpu/`` (the cells), reported in ``docs/studies/proxies-cpu/``; the account is ``docs/study.md``.
"""
