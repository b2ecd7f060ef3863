"""The z-loss study's grid: the plain model against z-loss 1e-4 (judged) and 1e-3 (reported) at d128 without weight decay, at rates 0.17 and 0.3, seeds 500-509 (issue 29).

  python -m experiments.sweep --sweep=zloss --scale=cpu --dry_run
  python -m experiments.sweep --sweep=zloss --scale=cpu     # 60 models, about 12 minutes planned, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss-cpu --pack=results/zloss-cpu --out=docs/studies/zloss-cpu

The z-loss probe's setting (``experiments/studies/zloss_probe/``, whose cells this grid
builds with its ``cells_of``): the muTransfer ladder's shape and settings (2 layers, 2 heads,
context 64, 16 sequences per step, 512-token vocabulary, 200 steps, warmup a tenth, cosine
decay to a tenth; sp, pre-LN, the base stage's readout multiplier 8 and attention multiplier
1), log Z probed at step 0 and every 50 steps. Where the probe found the runaway: d_model 128,
weight decay 0. One vmapped program per z-loss (0, 1e-4, 1e-3), its members the rates x seeds;
every arm on the same seeds (a seed sets the init and the batch order): paired.

- **Rates.** 0.3, where the probe's plain models ran away (+15.7 and +18.4 nats), and 0.17,
  the geometric middle of 0.1 and 0.3: at 0.1 the probe's d128 log Z stayed within 1.1 nats
  of log V in every seed of both arms (+0.14 .. +1.03), so the runaway sets in between, and there
  a z-loss could hold a runaway that 1e-4 did not hold at 0.3. Not 1.0: at 0.3 the plain
  models already ended 5.3 nats above their loss at init (a train loss of 190 at step 50), so a
  higher rate would test a divergence of the whole model, likely to non-finite values whose
  log Z cannot be read. Not 0.1: nothing runs away there to be held.
- **z-loss 1e-3** (ten times PaLM's): reported beside the claim, not judged; the probe's 1e-4
  term was about 0.1 nats at the end (1e-4 x 32^2), small beside the loss.
- **Seeds** 500-509: none an earlier study used (0-2 the norm x MLP and proxies studies,
  100-118 the confirmatory norm x MLP study, 200-202 the muP base stage, 300-308 the
  muTransfer ladder, 400-401 the probe; ``tests/test_zloss.py`` checks them against every
  study's grid and every committed cell). Ten: the power plan (``plan.py``) asks 7 of each
  holds test (9 at its spread's 80 % upper bound) and 5 of each loss test; the rest is a
  reserve for seeds whose plain model does not run away at 0.17 (the probe has no look there).
- **Budget** (the issue's: about 15 minutes of program time on the 2-core CPU): 60 models in
  3 programs, about 12 minutes at the proxies ladder's cost table (0.0529 s per d128
  model-step, 32 s per program; the muTransfer ladder measured 0.04-0.05 s idle). On a shared
  machine it is more: the probe's d128 programs, run beside the ladder, took 0.147 s per
  model-step and 43 s per program (28 minutes against its planned 12); at that rate this grid takes about 31.
  Twelve seeds would fit 15 minutes by the table and leave nothing for its error.
- **Not here:** d256 (the literature's growth with width). A d256 model costs 38 s at the
  table's 0.19 s per model-step (0.10-0.12 measured idle by the ladder) against 10.6 s at
  d128. With d256 the family has six tests (level 0.05 / 6), whose holds test needs 8 seeds:
  the two judged arms at 0.3 alone take about 11 minutes at d256, and the d128 arms at those
  seeds 7 more, 18 in all without the 1e-3 arm, over the budget. The probe's d64 and d128
  remain this shape's only look at width.
"""

from __future__ import annotations

from research.sweep import Sweep
from research import ladder as mutransfer  # the base stage's choice (was the muTransfer grid's)
from research import ladder
from experiments.studies.zloss import rules
from experiments.studies.zloss_probe import grid as probe

WIDTH = 128
RATES = (0.17, 0.3)
SEEDS = tuple(range(500, 510))
Z_LOSSES = (rules.PLAIN, rules.JUDGED_Z, rules.REPORTED_Z)

SCALES = {
    "cpu": dict(base="tiny", n_layer=2, n_head=2, block_size=64, batch_size=16, vocab=512,
                widths=(WIDTH,), steps=200, rates=RATES, seeds=SEEDS, decays=(0.0,),
                z_losses=Z_LOSSES, eval_batches=16, log_every=25, probe_every=50, extra={}),
    # The grid's structure at toy size: proves the command end to end; says nothing.
    "smoke": dict(base="tiny", n_layer=1, n_head=2, block_size=32, batch_size=8, vocab=321,
                  widths=(32,), steps=12, rates=RATES, seeds=SEEDS[:3], decays=(0.0,),
                  z_losses=Z_LOSSES, eval_batches=2, log_every=4, probe_every=6,
                  extra={"data.max_docs": 40}),
}


def get_sweep(scale: str = "cpu", choice: dict | None = None) -> Sweep:
  s, choice = mutransfer.scale_and_choice(SCALES, scale, choice)
  cells = probe.cells_of(s, choice)
  text = (f"The z-loss study: the muTransfer ladder's shape ({s['n_layer']} layers, {s['n_head']} "
          f"heads, context {s['block_size']}, batch {s['batch_size']}, vocabulary {s['vocab']}, "
          f"{s['steps']} steps, warmup a tenth, cosine decay to 10 %; sp, pre-LN, readout "
          f"multiplier {choice['readout_multiplier']:g}, attention multiplier "
          f"{choice['attention_multiplier']:g}) at d_model {', '.join(map(str, s['widths']))}, "
          f"weight decay 0 (where the z-loss probe found log Z running away); z-loss "
          f"{rules.PLAIN:g} (plain), {rules.JUDGED_Z:g} (judged) and {rules.REPORTED_Z:g} "
          f"(reported, not judged) x rates {', '.join(f'{r:g}' for r in s['rates'])}, seeds "
          f"{s['seeds'][0]}..{s['seeds'][-1]}, paired across arms; log Z probed every "
          f"{s['probe_every']} steps; {len(cells)} models in {len({c.group for c in cells})} "
          f"programs")
  if scale == "cpu":
    text += (f", about {ladder.minutes_cpu(cells):.0f} minutes on the idle 2-core CPU by the "
             f"proxies ladder's cost table (the z-loss probe's programs on a shared machine took "
             f"2.3x its estimate).")
  else:
    text = "**Smoke scale: toy models that prove the pipeline; they mean nothing.** " + text + "."
  return Sweep("zloss", scale, s["base"], cells, description=text)


def plan_lines(scale: str = "cpu") -> list[str]:
  """What ``--dry_run`` prints after the cells: the power plan (the cpu scale's)."""
  del scale
  from experiments.studies.zloss import plan  # pylint: disable=import-outside-toplevel
  return plan.lines(plan.compute())
