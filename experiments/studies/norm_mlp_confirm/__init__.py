"""The confirmatory norm x MLP study, in one place: ``grid.py`` (what is trained: one rate grid for both norms, unseen seeds, seeds per arm from the plan), ``plan.py`` (the power plan from the exploratory study's spread and costs), ``rules.py`` (its claims, frozen before the run) and ``report.py`` (the plan beside the verdicts).

It tests what the exploratory study (``experiments/studies/norm_mlp/``,
``docs/studies/norm_mlp-cpu``) found, with rules committed before its seeds were run; the
account is ``docs/study.md`` ("The confirmatory study").
"""

# The report's opening line (``studies.design``): how its rules relate to its data.
DESIGN = ("**Confirmatory study.** Its grid, seeds (none an earlier study used), power plan "
          "and rules were committed before it ran; it is judged only by those rules (the rules "
          "line below says whether they changed since), and the claims the plan could not "
          "power are declared not powered before the run.")
