"""The template study: copy this file to start a new one (docs/study.md walks through it).

Question: at the width ladder's shape, does qk-LayerNorm (Dehghani et al. 2023; Wortsman
et al. 2023, section 3.1) lower the best loss of a pre-LN model, and does it make the loss
less sensitive to the learning rate?

  python -m experiments.sweep --sweep=template --scale=smoke --dry_run    # the plan
  python -m experiments.sweep --sweep=template --scale=smoke              # about a minute
  python -m experiments.report --sweep_dir=runs/sweeps/template-smoke

A study is this one record: its arms (overrides on a shared shape), its grid per scale
(rates, seeds and any axis, e.g. ``model.d_model``), its claims from ``research/kinds.py``
with their multiplicity family and the effect each is planned for, and the per-seed spread
its power plan uses. The sweep, the power plan, the pre-registration (the hash of this
definition, recorded before the first cell trains), the verdicts and the report come from
``research/study.py``. Commit the file before its seeds run; seeds must be ones no earlier
study used (``research.registry.used_seeds``).
"""

from research import kinds
from research import ladder
from research.study import Arm, Grid, Study

CPU, SMOKE = ladder.CPU, ladder.SMOKE

STUDY = Study(
    name="template",
    question=("Does qk-LayerNorm lower the best loss of a small pre-LN model, and flatten its "
              "loss against the learning rate?"),
    design=("Exploratory: a template that shows the framework; its claims are judged, but no "
            "earlier result shaped them and none is confirmed by it."),
    arms=(Arm("pre", label="pre-LN, the reference"),
          Arm("pre+qk", {"model.qk_norm": True}, label="with qk-LayerNorm")),
    scales={
        "cpu": Grid(rates=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1), seeds=(700, 701, 702, 703, 704),
                    shared=ladder.ladder_overrides(CPU), axes={"model.d_model": (64,)},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU[64]),
        "smoke": Grid(rates=(1e-3, 1e-2, 1e-1), seeds=(700, 701), smoke=True,
                      shared=ladder.ladder_overrides(SMOKE), axes={"model.d_model": (32,)}),
    },
    claims=(
        kinds.Contrast("qk-LayerNorm lowers the best loss", terms=kinds.pair("pre+qk", "pre"),
                       predict="lower", quantity="best_loss", effect=0.02,
                         source="Wortsman et al. 2023 Fig. 1: a few hundredths at small width"),
        kinds.Contrast("qk-LayerNorm lowers the sensitivity to the rate", terms=kinds.pair("pre+qk", "pre"),
                       predict="lower", quantity="sensitivity", effect=0.05,
                         source="Wortsman et al. 2023 Fig. 1: tenths of a nat over their grid"),
    ),
    spread={"*": 0.02},
    spread_source="the proxies study's per-seed spread of paired differences at d64 (about 0.02 nats)",
)
