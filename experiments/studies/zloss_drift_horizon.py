"""The z-loss domain probe at a long horizon (issue 45): does log Z drift late over 20,000 steps?

  python -m experiments.sweep --sweep=zloss_drift_horizon --scale=cpu --dry_run
  python -m experiments.sweep --sweep=zloss_drift_horizon --scale=cpu     # about 30 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss_drift_horizon-cpu --pack=results/zloss_drift_horizon-cpu --out=docs/studies/zloss_drift_horizon-cpu

The first two domain probes (``zloss_drift_probe.py``: d128, 800 steps; ``zloss_drift_long.py``:
d64, 3,200 steps) found no late drift. Steps, not width, set the drift of the softmax's free
direction under Adam, and at d32 a step costs a fifth of d128's; so this probe trains the same
family (qk-LayerNorm, weight decay 0, multipliers 1, vocabulary 512) at d32 for 20,000 steps
(25x the first probe; warmup 2,000), log Z every 1,000 steps; rates 0.2 and 0.3, z-loss 0 and
1e-4, seeds 1120-1121 (none used before). The same finding rule (``kinds.Finding`` reading the drift, 2 nats over
the second half).

Exploratory, and written after looking: before it was written, three informal single-seed runs
(the tiny config's seed 0, not committed) showed no drift at 1,600 steps with a vocabulary of
8449, tied or untied, at 0.1 and 0.3; and at d32 over 20,000 steps, log Z fell from about 6.7
to 4.1 nats at 0.1 (-0.8 over the second half) and from 6.5 to 2.0 at 0.3 (-3.9), while the
validation loss fell to 3.24 (unigram 5.27). This probe says, on fresh seeds and with the
committed rule, whether that is a setting where a confirmatory study can judge z-loss.
"""

from experiments.readings.zloss import DriftTable
from research import kinds
from research import ladder
from research.study import Arm, Grid, Study
from experiments.studies import zloss_drift_probe as first

STEPS = 20000
CPU = dict(ladder.CPU, steps=STEPS, log_every=1000, extra={"diagnostics.every": 1000})

FINDING = kinds.Finding("Where log Z drifts late in a model that still trains (2 nats over the second "
                        "half of training)", arms=(first.PLAIN,), beside=((first.PLAIN, first.ZLOSS),), bound=2.0,
                        reads="drift")

STUDY = Study(
    name="zloss_drift_horizon",
    question=("Over 20,000 steps at d32, with qk-LayerNorm and no weight decay, does log Z drift "
              "late in training in a model that still trains (Wortsman et al. 2023, sec. 3.2)?"),
    design=("Exploratory probe, written after the first two domain probes found no drift and after "
            "informal single-seed runs (module docstring): its grid, seeds (1120-1121, none an "
            "earlier study used) and finding rule (the first probe's) were committed before it "
            "ran; it judges no claim of the literature."),
    arms=(Arm(first.PLAIN, {**first.SHAPE, "train.z_loss": 0.0}, label="qk-LayerNorm, weight decay 0, no z-loss"),
          Arm(first.ZLOSS, {**first.SHAPE, "train.z_loss": 1e-4}, label="qk-LayerNorm, weight decay 0, z-loss 1e-4")),
    scales={
        "cpu": Grid(rates=(0.2, 0.3), seeds=(1120, 1121),
                    shared={**ladder.ladder_overrides(CPU), **ladder.base_multipliers(ones=True)},
                    axes={"model.d_model": (32,)},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU[32],
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU),
        "smoke": Grid(rates=(1e-2, 1e-1), seeds=(1120, 1121), smoke=True,
                      shared={**ladder.ladder_overrides(first.SMOKE), **ladder.base_multipliers(ones=True)},
                      axes={"model.d_model": (32,)}),
    },
    claims=(FINDING,),
    tags={"model.d_model": "d"},
    reports=(DriftTable(2.0, finding=FINDING),),
)
