"""The muP base stage, in one place: ``grid.py`` (the base-width grid of readout and attention multipliers x rates x seeds), ``rules.py`` (the choice rule, fixed before the stage ran) and ``report.py`` (the base grid and the choice).

μTransfer (Yang et al. 2022, section 3) tunes the base model's multipliers at the base
width first, then carries them unchanged to every width; the width ladder that follows
(issue 29) reads the choice from ``results/mup_base-cpu/results.json``. The account
is ``docs/study.md`` ("The muP base stage").
"""

# The report's opening line (``studies.design``): how its rules relate to its data.
DESIGN = ("**Tuning stage.** Its grid, seeds (none an earlier study used) and its choice rule "
          "were committed before it ran; its output is a choice, not a verdict on the "
          "literature: the difference of the chosen setting from the default is measured on "
          "the seeds it was chosen on (optimistic), and the ladder that uses it runs on other "
          "seeds.")
