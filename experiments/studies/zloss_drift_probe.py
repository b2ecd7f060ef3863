"""The z-loss domain probe (issue 45): where, with the attention logits held by qk-LayerNorm, does log Z drift late in a model that still trains?

  python -m experiments.sweep --sweep=zloss_drift_probe --scale=cpu --dry_run
  python -m experiments.sweep --sweep=zloss_drift_probe --scale=cpu     # about 13 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss_drift_probe-cpu --pack=results/zloss_drift_probe-cpu --out=docs/studies/zloss_drift_probe-cpu

Wortsman et al. 2023 (sec. 3.2): without weight decay the output logits drift (log Z falls
far below 0) towards the end of training, in a model that still trains; z-loss (PaLM's
``1e-4 * log(Z)^2``) holds them. The first z-loss study (``zloss.py``) looked at rates where
the attention logits blew up within 50 steps and log Z burst and fell back: outside the
claim's domain. Here qk-LayerNorm (Dehghani et al. 2023; Wortsman et al.'s own setting
against attention-logit growth) holds the attention logits, so the models can train at
rates where the output logits are the remaining instability. The ladder's shape at d128
with the family's own multipliers (1, as andrea120m has; GPT-2's), weight decay 0, 800
steps (4x the ladder's, for a late drift to show; warmup 80), log Z probed every 50 steps;
rates 1e-2 .. 3e-1, z-loss 0 and 1e-4, seeds 1100-1101 (none used before).

The quantity is log Z's trajectory, not its last value: its late drift is log Z at the end
minus log Z half-way through, read only in models that learn (completed, not diverged,
final loss 0.1 nats below the unigram). Exploratory: it judges no claim of the literature;
its finding names the rates at which the confirmatory study (``zloss_drift.py``, written
after it, on other seeds) judges z-loss.
"""

from experiments.readings.zloss import DriftTable
from research import kinds
from research import ladder
from research.study import Arm, Grid, Study

STEPS = 800
CPU = dict(ladder.CPU, steps=STEPS, log_every=50, extra={"diagnostics.every": 50})
SMOKE = dict(ladder.SMOKE, extra={**ladder.SMOKE["extra"], "diagnostics.every": 4})
SHAPE = {"model.qk_norm": True, "train.weight_decay": 0.0}
PLAIN, ZLOSS = "qk+wd0+z0", "qk+wd0+z0.0001"

FINDING = kinds.Finding("Where log Z drifts late in a model that still trains (2 nats over the second "
                        "half of training)", arms=(PLAIN,), beside=((PLAIN, ZLOSS),), bound=2.0, reads="drift")

STUDY = Study(
    name="zloss_drift_probe",
    question=("With the attention logits held by qk-LayerNorm and no weight decay, at which rates "
              "does log Z drift late in training in a model that still trains (Wortsman et al. "
              "2023, sec. 3.2's output-logit divergence), and how far?"),
    design=("Exploratory probe: its grid, seeds (1100-1101, none an earlier study used) and "
            "finding rule were committed before it ran; it judges no claim of the literature. "
            "It says where the z-loss claim can be judged; that claim's rule is fixed after it "
            "and runs on other seeds."),
    arms=(Arm(PLAIN, {**SHAPE, "train.z_loss": 0.0}, label="qk-LayerNorm, weight decay 0, no z-loss"),
          Arm(ZLOSS, {**SHAPE, "train.z_loss": 1e-4}, label="qk-LayerNorm, weight decay 0, z-loss 1e-4")),
    scales={
        "cpu": Grid(rates=(1e-2, 3e-2, 1e-1, 3e-1), seeds=(1100, 1101),
                    shared={**ladder.ladder_overrides(CPU), **ladder.base_multipliers(ones=True)},
                    axes={"model.d_model": (128,)},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU[128],
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU),
        "smoke": Grid(rates=(1e-2, 1e-1), seeds=(1100, 1101), smoke=True,
                      shared={**ladder.ladder_overrides(SMOKE), **ladder.base_multipliers(ones=True)},
                      axes={"model.d_model": (32,)}),
    },
    claims=(FINDING,),
    tags={"model.d_model": "d"},
    reports=(DriftTable(2.0, finding=FINDING),),
)
