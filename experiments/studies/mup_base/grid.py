"""The muP base stage's grid: the base model's readout and attention multipliers, tuned at the base width with the learning rate (issue 29).

  python -m experiments.sweep --sweep=mup_base --scale=cpu --dry_run   # the plan, trains nothing
  python -m experiments.sweep --sweep=mup_base --scale=cpu             # about 20 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/mup_base-cpu --pack=results/mup_base-cpu --out=docs/studies/mup_base-cpu

The base of the width ladder that follows: the proxies study's shape (2 layers, 2 heads,
context 64, 16 sequences per step, a 512-token vocabulary, 200 steps, warmup a tenth, cosine
decay to a tenth) at ``d_model`` = ``base_width`` = 32 (``d_head`` 16), under muP, which at
its base width is the sp model with the same multipliers, to the bit (tests/test_model.py,
tests/test_step.py), so the choice is the tuned sp base model's. With the rules of
``andrea_jax/mup.py``'s defaults: attention ``sqrt(d_head_base) / d_head`` and the
decay with ``lr x weight_decay`` constant across width.

The grid (Yang et al. tune the output and attention multipliers of the base model first; the
embedding multiplier stays 1 here: under Adam the input layer's updates are of order the rate
at any width, and the budget goes to the two the issue names): readout multiplier 1, 2, 4,
8, 16 (factor-2 steps; the reference implementation found 8 at base 16 brought muP level with
sp at d128), attention multiplier 0.5, 1, 2, each pair over the half-decade rates 1e-3 .. 1e-1
(the proxies study's optima at its narrow widths lay at 1e-2 .. 3e-2), three seeds (200,
201, 202: no earlier study used them; the norm x MLP studies used 0-2 and 100-118, the
proxies study 0-2). One vmapped program per multiplier pair, its members the rates x seeds;
refinable: a seed whose optimum is at the rate grid's edge gets the next rate beyond it
(``base.refine``, at most two rounds) before anything is chosen.
"""

from __future__ import annotations

from andrea_jax import errors
from research.sweep import Cell, Sweep
from experiments.studies.mup_base import rules
from research import ladder

SCALES = {
    "cpu": dict(base="tiny", n_layer=2, n_head=2, block_size=64, batch_size=16, vocab=512,
                base_width=32, steps=200, rates=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
                readouts=rules.READOUTS, attentions=rules.ATTENTIONS, seeds=(200, 201, 202),
                eval_batches=16, log_every=25, extra={}),
    # The grid's structure at toy size: proves the command end to end; says nothing.
    "smoke": dict(base="tiny", n_layer=1, n_head=2, block_size=32, batch_size=8, vocab=321,
                  base_width=32, steps=12, rates=(1e-3, 1e-2, 1e-1), readouts=(1.0, 4.0),
                  attentions=(1.0,), seeds=(200, 201), eval_batches=2, log_every=4,
                  extra={"data.max_docs": 40}),
}
def group_name(readout: float, attention: float) -> str:
  return f"readout{readout:g}-attention{attention:g}"


def cells_of(s: dict) -> list[Cell]:
  common = {**ladder.ladder_overrides(s), "model.d_model": s["base_width"],
            "model.parametrization": "mup", "model.base_width": s["base_width"],
            "model.mup_attention": "base", "model.mup_decay": "constant"}
  cells = []
  for readout in s["readouts"]:
    for attention in s["attentions"]:
      o = {**common, "model.readout_multiplier": float(readout),
           "model.attention_multiplier": float(attention)}
      group, arm = group_name(readout, attention), rules.arm_name(readout, attention)
      cells += [Cell(f"{group}-lr{lr:g}-seed{seed}", {**o, "train.learning_rate": lr, "train.seed": seed},
                     (arm,), seed, group, 0, True)
                for lr in s["rates"] for seed in s["seeds"]]
  return cells


def get_sweep(scale: str = "cpu") -> Sweep:
  if scale not in SCALES:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(SCALES)}")
  s = SCALES[scale]
  cells = cells_of(s)
  text = (f"The muP base stage at d_model = base_width = {s['base_width']} ({s['n_layer']} layers, "
          f"{s['n_head']} heads, context {s['block_size']}, batch {s['batch_size']}, vocabulary "
          f"{s['vocab']}, {s['steps']} steps, warmup a tenth, cosine decay to 10 %): readout "
          f"multipliers {', '.join(f'{r:g}' for r in s['readouts'])} x attention multipliers "
          f"{', '.join(f'{a:g}' for a in s['attentions'])}, each over rates "
          f"{', '.join(f'{r:g}' for r in s['rates'])} (refined at an edge optimum) and seeds "
          f"{', '.join(map(str, s['seeds']))}; {len(cells)} models in "
          f"{len({c.group for c in cells})} programs, about {ladder.minutes_cpu(cells):.0f} minutes "
          f"on the 2-core CPU before refinement.")
  if scale == "smoke":
    text = "**Smoke scale: a toy grid that proves the pipeline; its choice means nothing.** " + text
  return Sweep("mup_base", scale, s["base"], cells, description=text)
