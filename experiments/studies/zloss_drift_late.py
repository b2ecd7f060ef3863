"""z-loss judged in its domain, read late in training (issue 45): where the plain model's log Z, averaged over the last fifth of training, lies 2 nats below 0 in a model that still trains, does z-loss 1e-4 hold it?

  python -m experiments.sweep --sweep=zloss_drift_late --scale=cpu --dry_run    # the cells and the power plan
  python -m experiments.sweep --sweep=zloss_drift_late --scale=cpu --parallel=2  # 24 models, about 3.5 hours, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss_drift_late-cpu --pack=results/zloss_drift_late-cpu --out=docs/studies/zloss_drift_late-cpu

Wortsman et al. 2023 (sec. 3.2): without weight decay the output logits drift late in
training, log Z falling far below 0 in a model that still trains, and PaLM's z-loss
(``1e-4 * log(Z)^2``) holds log Z near 0. The confirmatory study before this one
(``zloss_drift.py``, ``results/zloss_drift-cpu``) could not judge it: at 50,000 steps only 2
of its 4 plain seeds ended 2 nats below 0, and it read log Z at the last reading alone, which
moved 1-3 nats between readings 2,500 steps apart. Its outcome shaped this plan, so that
study is exploratory data here; this one changes three things, each from it:

- **The reading**: log Z averaged over the readings in the last 20 % of training (8 readings,
  every 2,000 steps from 56,000 to 70,000), in models that still train (``kinds.Runaway`` with a
  ``window``; ``tests/test_zloss_drift_late.py`` shows each way).
- **The horizon**: 70,000 steps (warmup 7,000). Each plain seed's log Z over the second half
  of the 50,000-step run, fitted by a line and carried on, puts its late mean at -4.2, -2.2,
  -10.2 and -11.6: every seed past -2, the slowest barely. That ignores the stretched cosine
  schedule; it is the plan's premise, not a measurement.
- **The seeds**: a seed is judged only where the plain model runs away, and the holds test
  needs 8 judged seeds (at level 0.05, power 80 %; 18 at the spread's 80 % upper bound) at the
  spread of z-loss's late overshoot there (1.19, 2.09, 3.12, -0.72: sd 1.63, 4 models) for
  Wortsman's effect, a held overshoot of 0, 2 nats from the bound (the plan below). So the
  grid trains 12 seeds, 1140-1151 (none used before), paired across the two arms: that 8 of 12
  run away is 93 % likely at a hit rate of 0.8, 99.6 % at 0.9, 19 % at 0.5 (the 50,000-step
  run's). Fewer judged seeds make the test weaker, not wrong: it can still decide either way,
  and with fewer than 3 it says "cannot be judged".

Rate 0.3 and the shape of the probes (d32, qk-LayerNorm, weight decay 0, multipliers 1,
vocabulary 512). Checkpoints every 5,000 steps: an interrupted sweep resumes from them. The
trajectory table (``DriftTable``, ``experiments/readings/zloss.py``) shows every model's log Z
and its largest attention logit (650-1,300 at the end of the 50,000-step run, despite
qk-LayerNorm: reported beside the verdicts, not separated from them here).
"""

from experiments.readings.zloss import DriftTable, LateSeeds
from research import kinds
from research import ladder
from research import power
from research.study import Budget, Grid, Study
from experiments.studies import zloss_drift as before
from experiments.studies import zloss_drift_probe as first

STEPS, RATE, WINDOW, SEEDS = 70000, 0.3, 0.2, tuple(range(1140, 1152))
CPU = dict(ladder.CPU, steps=STEPS, log_every=2000,
           extra={"diagnostics.every": 2000, "checkpoint.every": 5000})
# The 50,000-step run's plain program, 4 models in one program, measured beside a little load.
SECONDS_PER_MODEL_STEP = 1720 / (4 * 50000)

CLAIMS = (
    kinds.Runaway(f"z-loss 0.0001 holds log Z where the plain model's drifts below 0 late in "
                  f"training (rate {RATE:g})", effect=2.0, source=before.HOLDS, arm=first.ZLOSS,
                  reference=first.PLAIN, rate=RATE, bound=2.0, min_seeds=3, window=WINDOW),
    kinds.Runaway(f"z-loss 0.0001 lowers the final loss where the plain model's log Z "
                  f"drifts below 0 late in training (rate {RATE:g})", effect=0.05,
                  source=before.LOSS, arm=first.ZLOSS, reference=first.PLAIN, rate=RATE,
                  bound=2.0, min_seeds=3, reads="loss", margin=0.02, window=WINDOW),
)

STUDY = Study(
    name="zloss_drift_late",
    question=("Where the plain model's log Z, averaged over the last fifth of training, lies 2 "
              "nats below 0 in a model that still trains (d32, qk-LayerNorm, weight decay 0, "
              "70,000 steps, rate 0.3), does z-loss 1e-4 hold log Z and lower the final loss "
              "(Wortsman et al. 2023, sec. 3.2)?"),
    design=("Confirmatory: its grid, seeds (1140-1151, none an earlier study used), power plan "
            "and rules were committed before it ran, after the confirmatory run that could not "
            "judge it (results/zloss_drift-cpu), which is exploratory data here: it chose the "
            "late reading, the horizon (extrapolated, module docstring) and the seed count."),
    arms=before.STUDY.arms,
    scales={
        "cpu": Grid(rates=(RATE,), seeds=SEEDS,
                    shared={**ladder.ladder_overrides(CPU), **ladder.base_multipliers(ones=True)},
                    axes={"model.d_model": (32,)}, seconds_per_model_step=SECONDS_PER_MODEL_STEP,
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU,
                    budget=Budget(250.0, min_seeds=4, source="the 50,000-step run's measured "
                                  "program time")),
        "smoke": before.STUDY.scales["smoke"],
    },
    claims=CLAIMS,
    # The 50,000-step run's 4 models per arm, over its last 20 % (readings 40,000-50,000):
    # z-loss's overshoot below 0 (minus its late log Z), and z-loss - plain final loss by seed.
    spread={CLAIMS[0].key: power.Spread.of([1.19, 2.09, 3.12, -0.72]),
            CLAIMS[1].key: power.Spread.of([-0.028, 0.003, 0.151, -0.076])},
    spread_source=("the 50,000-step confirmatory run's 4 models per arm (results/zloss_drift-cpu; "
                   "tests/test_zloss_drift_late.py recomputes them): z-loss's late overshoot "
                   "below 0 (holds); z-loss - plain final loss by seed (loss)"),
    not_powered=(CLAIMS[1].claim,),
    loso_min_seeds=4,
    tags={"model.d_model": "d"},
    reports=(DriftTable(2.0, note="The late drift (the end minus half-way) and whether each "
                        "model learns; the claims read log Z over the last 20 % of training."),
             LateSeeds(first.PLAIN, (first.ZLOSS,), RATE, bound=2.0, window=WINDOW)),
)
