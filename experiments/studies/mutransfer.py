"""The muTransfer width ladder (issue 29): sp and muP across widths 32 to 256 on the muP base stage's tuned multipliers, and qk-LayerNorm at d128.

  python -m experiments.sweep --sweep=mup_base --scale=cpu      # first: the base stage, committed
  python -m experiments.sweep --sweep=mutransfer --scale=cpu    # about 97 minutes before refinement
  python -m experiments.report --sweep_dir=runs/sweeps/mutransfer-cpu

The proxies ladder's shape (``research/ladder.py``); every arm carries the multipliers the
base stage chose at the base width (``ladder.base_multipliers``: read from its committed
results, data not an import), so at the base width sp and muP are one model. Rates refined
where a seed's optimum lies at an edge. Seeds from 300 (none used before): 9 for sp and muP
(the power plan made before the run, from the proxies ladder's and the base stage's spreads
and the measured costs, budget 100 minutes), 5 for ``pre+qk``, whose claim needs 36-42 and is
declared not powered. Run at e5552a0's rules (``experiments/studies/mutransfer/rules.py``);
re-expressed here (``verdicts_before.json``).
"""

from research import figures
from research import kinds
from research import ladder
from research.study import Arm, Grid, PerArm, Study

W = "model.d_model"
CPU = dict(n_layer=2, n_head=2, block_size=64, vocab=512, batch_size=16, steps=200,
           eval_batches=16, log_every=25, extra={})
SMOKE = dict(n_layer=1, n_head=2, block_size=32, vocab=321, batch_size=8, steps=12,
             eval_batches=2, log_every=4, extra={"data.max_docs": 40})
ONES = {"model.readout_multiplier": 1.0, "model.attention_multiplier": 1.0}
LADDER = dict(axis=W, learns="every_seed")  # every seed below the plateau: the ladder learns
PROXIES = "the proxies ladder's per-seed spread"

# andrea120m's rate: muP's optimum does not move (the mean); sp's line, checked on d256 held out.
MUP = ("model.parametrization", "model.base_width", "model.readout_multiplier", "model.attention_multiplier")
RATES = (kinds.RateAt("pre+mup", W, 768, method="mean", learns="every_seed", label="muP",
                      config="andrea120m", carry=MUP),
         kinds.RateAt("pre", W, 768, min_points=2, holdout=True, learns="every_seed", label="sp"))

STUDY = Study(
    name="mutransfer",
    question=("Under muP with the tuned base, does the optimal rate stop moving with width "
              "(Yang et al. 2022) at no cost in loss, and does qk-LayerNorm lower the rate "
              "sensitivity at the widest rung (Wortsman et al. 2023)?"),
    design=("Confirmatory ladder: its grid, seeds and rules were committed before it ran, after "
            "the base stage whose choice it carries; the proxies ladder is exploratory for it."),
    arms=(Arm("pre", label="sp: the reference"),
          Arm("pre+mup", {"model.parametrization": "mup", "model.base_width": 32,
                          "model.mup_attention": "base", "model.mup_decay": "constant"}, label="muP"),
          Arm("pre+qk", {"model.qk_norm": True}, label="sp with qk-LayerNorm")),
    scales={
        "cpu": Grid(rates=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2), seeds=tuple(range(300, 309)),
                    shared={**ladder.ladder_overrides(CPU), **ladder.base_multipliers()},
                    axes={W: (32, 64, 128, 256)}, axis_names={W: "d"},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU,
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU, refine=True,
                    members_per_program=24,
                    per_arm={"pre+qk": PerArm(seeds=tuple(range(300, 305)), axes={W: (128,)})}),
        "smoke": Grid(rates=(1e-3, 1e-2, 1e-1), seeds=(300, 301, 302), smoke=True,
                      shared={**ladder.ladder_overrides(SMOKE), **ONES}, axes={W: (32, 64)},
                      axis_names={W: "d"}, refine=True,
                      per_arm={"pre+qk": PerArm(seeds=(300, 301), axes={W: (64,)})}),
    },
    claims=(
        kinds.OptimumSlopeGap("under muP the optimal rate moves less with width than under sp",
                              arm="pre+mup", reference="pre", **LADDER, effect=0.35,
                              source="half the sp movement the proxies ladder measured (-0.70)"),
        kinds.OptimumFlat("under muP the optimal rate moves by less than a factor 2 over the ladder",
                          arm="pre+mup", factor=2.0, **LADDER, effect=0.0, source="Yang et al. 2022"),
        kinds.NotWorseAtEvery("at every width muP's best loss is within 0.08 nats of sp's or better",
                              arm="pre+mup", reference="pre", margin=0.08, **LADDER, effect=0.08,
                              power=0.8 ** (1 / 3),  # each of the 3 widths above the base
                              source="Yang et al. 2022: muP at least as good; 2 % of the loss"),
        kinds.FixedRateSlope("under muP a wider model is not worse at a fixed rate", arm="pre+mup",
                             margin=0.01, **LADDER, effect=0.06,
                             source="half the proxies ladder's sp slope at a fixed rate (-0.096)"),
        kinds.SensitivityGap("qk-LayerNorm lowers the learning-rate sensitivity at the widest rung",
                             arm="pre+qk", reference="pre", at="shared", **LADDER, effect=0.1,
                             source="twice the sensitivity margin"),
    ),
    # The plan's spreads (3 seeds each): the proxies ladder's and the base stage's cells.
    spread={"under muP the optimal rate moves less with width than under sp": 0.241,
            "under muP the optimal rate moves by less than a factor 2 over the ladder": 0.311,
            "at every width muP's best loss is within 0.08 nats of sp's or better": 0.046,
            "under muP a wider model is not worse at a fixed rate": 0.031,
            "qk-LayerNorm lowers the learning-rate sensitivity at the widest rung": 0.185},
    spread_source=f"{PROXIES} (docs/results/proxies-cpu) and the base stage's (mup_base-cpu)",
    not_powered=("qk-LayerNorm lowers the learning-rate sensitivity at the widest rung",),
    sections=(kinds.Rates("Learning rates for andrea120m (d_model 768)", RATES,
        note="Caveats: the ladder's depth, heads, context, batch, steps and vocabulary are not "
             "andrea120m's; the rate carries the width rule only."),
              figures.AxisFigures(W, logit_arms=("pre", "pre+qk"), rates=RATES)),
)
