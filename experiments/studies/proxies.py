"""Small-scale proxies across width (issue 23): learning-rate sensitivity and rate transfer on a width ladder.

  python -m experiments.sweep --sweep=proxies --scale=cpu     # about 44 minutes
  python -m experiments.report --sweep_dir=runs/sweeps/proxies-cpu --pack=results/proxies-cpu --out=docs/studies/proxies-cpu

Wortsman et al. 2023 judge an architecture by its final loss over a grid of rates at each of
several widths; Yang et al. 2022 ask whether the optimal rate moves with width. A width
ladder (``research/ladder.py``: ``d_model`` only, so ``d_head`` grows with it), each width
over one half-decade grid reaching instability at its top, three seeds paired across arms.
Each arm changes one thing from ``pre``. Run at c9c3aec's rules (then
``experiments/proxy_verdicts.py``); re-expressed here (``verdicts_before.json``).
"""

import math

from experiments.readings import figures  # report items, not rules
from experiments.readings.rates import RateAt, Rates
from research import curves
from research import kinds
from research import ladder
from research.study import Arm, Grid, Study

W = "model.d_model"
HALF_DECADES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
CPU = ladder.CPU
SMOKE = dict(CPU, block_size=32, vocab=321, batch_size=8, steps=20, eval_batches=2,
             log_every=5, extra={"data.max_docs": 40})
# The andrea120m depth family on one GPU (d_head 96 at its width 768). Defined, not run.
GPU = dict(n_layer=12, n_head=8, block_size=1024, vocab=8449, batch_size=32, steps=2000,
           eval_batches=16, log_every=50, extra={"model.compute_dtype": "auto"})

# andrea120m's width, where the ladder's optima are extrapolated.
RATES = (RateAt("pre", W, 768, label="standard parametrisation"),
         RateAt("pre+mup", W, 768, label="muP"))

STUDY = Study(
    name="proxies",
    question=("Does qk-LayerNorm or z-loss lower the learning-rate sensitivity at the widest "
              "rung, does the sensitivity grow with width without them (Wortsman et al. 2023), "
              "and does muP's optimal rate move less with width than sp's (Yang et al. 2022)?"),
    design=("Exploratory: the first ladder of the project; its rules were committed before it "
            "ran (c9c3aec), nothing before it shaped them."),
    arms=(Arm("pre", label="pre-LN, sp, GPT-2 init: the reference"),
          Arm("pre+qk", {"model.qk_norm": True}, label="qk-LayerNorm"),
          Arm("pre+z", {"train.z_loss": 1e-4}, label="PaLM's z-loss 1e-4"),
          Arm("post", {"model.norm": "post"}, label="post-LN"),
          # The muP rules it ran with (before mup.py's defaults changed); base: the narrowest.
          Arm("pre+mup", {"model.parametrization": "mup", "model.mup_attention": "inverse",
                          "model.mup_decay": "with_rate", "model.base_width": 16}, label="muP")),
    scales={
        "cpu": Grid(rates=HALF_DECADES, seeds=(0, 1, 2), shared=ladder.ladder_overrides(CPU),
                    axes={W: (16, 32, 64, 128)},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU,
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU),
        "smoke": Grid(rates=(1e-3, 1e-2, 1e-1), seeds=(0, 1), shared=ladder.ladder_overrides(SMOKE),
                      axes={W: (16, 32, 64)}, smoke=True),
        "gpu": Grid(rates=(1e-4,) + HALF_DECADES[:-1], seeds=(0, 1, 2), base_config="andrea120m",
                    shared=ladder.ladder_overrides(GPU), axes={W: (128, 256, 512, 1024)}, members_per_program=6,
                    arm_overrides={"pre+mup": {"model.base_width": 128}}),
    },
    # Each claim alone (family None), as its rules judged it.
    claims=(
        *(kinds.Contrast(f"{what} lowers the learning-rate sensitivity", family=None, terms=kinds.pair("pre", arm),
                         quantity="sensitivity", over=W, holm="first", margin=curves.SENSITIVITY_MARGIN, edge=False)
          for what, arm in (("qk-LayerNorm", "pre+qk"), ("z-loss", "pre+z"))),
        kinds.Slope("without qk-norm, the learning-rate sensitivity grows with width", arm="pre", axis=W,
                    of="sensitivity", predict="higher", margin=curves.SENSITIVITY_MARGIN, per_span=True,
                    same_first=True, family=None, also=("pre+qk", "pre+z", "post", "pre+mup")),
        kinds.Slope("under muP the optimal learning rate moves less with width than under sp", arm="pre+mup",
                    reference="pre", axis=W, predict="higher", margin=math.log(curves.RATE_FACTOR), per_span=True,
                    same_first=True, family=None),
    ),
    tags={W: "d"},
    reports=(Rates("Predicted learning rates for andrea120m", RATES,
        note="Caveats: the ladder's depth, context, batch, steps and vocabulary are not "
             "andrea120m's; the prediction carries the width rule only, and beyond the widest "
             "rung it is a straight line in log-log that the ladder cannot check.",
        key="predictions"),
              figures.AxisFigures(W, logit_arms=("pre", "pre+qk"), rates=RATES)),
)
