"""The z-loss domain probe at a longer horizon (issue 45): does log Z drift late when the model trains four times longer?

  python -m experiments.sweep --sweep=zloss_drift_long --scale=cpu --dry_run
  python -m experiments.sweep --sweep=zloss_drift_long --scale=cpu     # about 11 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss_drift_long-cpu --pack=results/zloss_drift_long-cpu --out=docs/studies/zloss_drift_long-cpu

The first domain probe (``zloss_drift_probe.py``, d128, 800 steps) found no late drift: log Z
moved by at most +0.9 nats over the second half of training, growing with the rate up to
0.1 (+0.73 at 0.1; at 0.3 the attention logits grew to about 375 despite qk-LayerNorm and one
seed did not learn). Without weight decay the softmax's free direction (every logit moved
together) takes Adam's normalised steps as a random walk, so a drift grows with the rate and
the horizon: here 3,200 steps (4x; warmup 320), at d64 for the budget (the same family, half
the width), rates 0.1 and 0.2 (between the largest that trained and the one whose attention
grew), z-loss 0 and 1e-4, seeds 1110-1111, log Z every 200 steps. The same finding rule
(``kinds.Finding`` reading the drift, 2 nats over the second half). Exploratory, written after the first probe
showed nothing: it says whether a longer horizon reaches the claim's domain.
"""

from experiments.readings.zloss import DriftTable
from research import kinds
from research import ladder
from research.study import Arm, Grid, Study
from experiments.studies import zloss_drift_probe as first

STEPS = 3200
CPU = dict(ladder.CPU, steps=STEPS, log_every=200, extra={"diagnostics.every": 200})

FINDING = kinds.Finding("Where log Z drifts late in a model that still trains (2 nats over the second "
                        "half of training)", arms=(first.PLAIN,), beside=((first.PLAIN, first.ZLOSS),), bound=2.0,
                        reads="drift")

STUDY = Study(
    name="zloss_drift_long",
    question=("At four times the first probe's horizon, with qk-LayerNorm and no weight decay, does "
              "log Z drift late in training in a model that still trains (Wortsman et al. 2023, "
              "sec. 3.2)?"),
    design=("Exploratory probe, written after the first domain probe found no drift: its grid, "
            "seeds (1110-1111, none an earlier study used) and finding rule (the first probe's) "
            "were committed before it ran; it judges no claim of the literature."),
    arms=(Arm(first.PLAIN, {**first.SHAPE, "train.z_loss": 0.0}, label="qk-LayerNorm, weight decay 0, no z-loss"),
          Arm(first.ZLOSS, {**first.SHAPE, "train.z_loss": 1e-4}, label="qk-LayerNorm, weight decay 0, z-loss 1e-4")),
    scales={
        "cpu": Grid(rates=(0.1, 0.2), seeds=(1110, 1111),
                    shared={**ladder.ladder_overrides(CPU), **ladder.base_multipliers(ones=True)},
                    axes={"model.d_model": (64,)},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU[64],
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU),
        "smoke": Grid(rates=(1e-2, 1e-1), seeds=(1110, 1111), smoke=True,
                      shared={**ladder.ladder_overrides(first.SMOKE), **ladder.base_multipliers(ones=True)},
                      axes={"model.d_model": (32,)}),
    },
    claims=(FINDING,),
    tags={"model.d_model": "d"},
    reports=(DriftTable(2.0, finding=FINDING),),
)
