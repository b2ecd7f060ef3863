"""The z-loss probe (issue 29): where, at the muTransfer ladder's shape, the output softmax's log Z runs away from a uniform softmax's.

  python -m experiments.sweep --sweep=zloss_probe --scale=cpu --dry_run
  python -m experiments.sweep --sweep=zloss_probe --scale=cpu     # about 15 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss_probe-cpu --pack=results/zloss_probe-cpu --out=docs/studies/zloss_probe-cpu

A z-loss claim must be judged where the output logits diverge, and in the proxies study they
did not (log Z 5.7-6.9 at every rate and width, weight decay 0.1). Wortsman et al. 2023
(section 3.2) see log Z run away without weight decay at high rates. The ladder's shape
(``research/ladder.py``; sp, pre-LN, the base stage's readout and attention multipliers) at
d_model 64 and 128: weight decay 0.1 (the ladder's) or 0 x z-loss 0 or 1e-4 (PaLM's), rates
1e-2 .. 3e-1 (the ladder's top and above), seeds 400-401; log Z probed every 50 steps.

Its finding rule was changed after the probe ran (so the finding is exploratory): the rule
fixed before it measured log Z's drift from step 0; with readout multiplier 8 log Z starts at
9.1 at d128 and every d128 model's fell 2.5-3.2 nats towards log V as it learned, which that
rule called a divergence. log V is the reference that does not move with the init.
"""

from experiments.readings.zloss import ExcessTable
from research import kinds
from research import ladder
from research.study import Arm, Grid, Study

CPU = dict(ladder.CPU, extra={"diagnostics.every": 50})  # log Z every 50 steps
SMOKE = dict(ladder.SMOKE, extra={**ladder.SMOKE["extra"], "diagnostics.every": 6})
TUNED, UNTUNED = ladder.base_multipliers(), ladder.base_multipliers(ones=True)  # cpu, smoke
SETTINGS = [(wd, z) for wd in (0.1, 0.0) for z in (0.0, 1e-4)]

FINDING = kinds.Finding("Where the output logits diverge (log Z ends 2 nats from a uniform softmax's)",
                        arms=("wd0.1+z0", "wd0+z0"),
                        beside=(("wd0.1+z0", "wd0.1+z0.0001"), ("wd0+z0", "wd0+z0.0001")),
                        axis="model.d_model", bound=2.0, names=("train.weight_decay",))

STUDY = Study(
    name="zloss_probe",
    question=("Where, at the muTransfer ladder's shape, does the output softmax's log Z run "
              "away from a uniform softmax's: with or without weight decay, at which rate and width?"),
    design=("Exploratory probe: its grid, seeds (400-401, none an earlier study used) and "
            "finding rule were committed before it ran (the rule changed after, see above); it "
            "judges no claim of the literature. It says where a z-loss claim can be judged; that "
            "claim's rule is fixed after it and runs on other seeds."),
    arms=tuple(Arm(f"wd{wd:g}+z{z:g}", {"train.weight_decay": wd, "train.z_loss": z},
                   label=f"weight decay {wd:g}, z-loss {z:g}") for wd, z in SETTINGS),
    scales={
        "cpu": Grid(rates=(1e-2, 3e-2, 1e-1, 3e-1), seeds=(400, 401),
                    shared={**ladder.ladder_overrides(CPU), **TUNED}, axes={"model.d_model": (64, 128)},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU[128],
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU),
        "smoke": Grid(rates=(1e-2, 1e-1), seeds=(400, 401), smoke=True,
                      shared={**ladder.ladder_overrides(SMOKE), **UNTUNED}, axes={"model.d_model": (32, 64)}),
    },
    claims=(FINDING,),
    tags={"model.d_model": "d"},
    reports=(ExcessTable(2.0, finding=FINDING),),
)

# Read after the run (issue 45; exploratory, outside STUDY and so outside the rules' identity):
# divergence recounted (a final loss above the initial), and how the models at 0.3 got there.
from experiments.readings.divergence import Divergence  # noqa: E402  (a reading, not a rule)
POSTHOC = (Divergence({0.3: (STUDY.claims[0].claim,)}, (
    "Wortsman et al. 2023's output-logit divergence (sec. 3.2) is a late drift of log Z in a model "
    "that still trains; at 0.3 the attention logits blew up within the first probe and log Z burst "
    "and fell back: a large log Z at the end there is the wreck of such a model, not that drift.")),)
