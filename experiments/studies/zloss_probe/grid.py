"""The z-loss probe's grid: weight decay 0.1 and 0 x z-loss 0 and 1e-4 x high rates, at d_model 64 and 128 (issue 29).

  python -m experiments.sweep --sweep=zloss_probe --scale=cpu --dry_run
  python -m experiments.sweep --sweep=zloss_probe --scale=cpu     # about 15 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/zloss_probe-cpu --pack=results/zloss_probe-cpu --out=docs/studies/zloss_probe-cpu

The muTransfer ladder's shape and settings (2 layers, 2 heads, context 64, 16 sequences per
step, 512-token vocabulary, 200 steps, warmup a tenth, cosine decay to a tenth; sp, pre-LN,
the base stage's readout and attention multipliers), at two of its widths. Per width, one
vmapped program per (weight decay, z-loss): weight decay 0.1 (the ladder's) or 0 (Wortsman et
al.'s setting for logit divergence), z-loss 0 or 1e-4 (PaLM's), each over the rates 1e-2 ..
3e-1 (the ladder's top and above: where log Z moves, if anywhere), seeds 400 and 401. The
output softmax's mean log Z is probed at step 0 and every 50 steps.
"""

from __future__ import annotations

from research.sweep import Cell, Sweep
from research import ladder as mutransfer  # the base stage's choice (was the muTransfer grid's)
from research import ladder

SCALES = {
    "cpu": dict(base="tiny", n_layer=2, n_head=2, block_size=64, batch_size=16, vocab=512,
                widths=(64, 128), steps=200, rates=(1e-2, 3e-2, 1e-1, 3e-1), seeds=(400, 401),
                decays=(0.1, 0.0), z_losses=(0.0, 1e-4), eval_batches=16, log_every=25,
                probe_every=50, extra={}),
    # The grid's structure at toy size: proves the command end to end; says nothing.
    "smoke": dict(base="tiny", n_layer=1, n_head=2, block_size=32, batch_size=8, vocab=321,
                  widths=(32, 64), steps=12, rates=(1e-2, 1e-1), seeds=(400, 401),
                  decays=(0.1, 0.0), z_losses=(0.0, 1e-4), eval_batches=2, log_every=4,
                  probe_every=6, extra={"data.max_docs": 40}),
}


def arm_name(weight_decay: float, z_loss: float) -> str:
  """``wd0+z0.0001``: the arm of one (weight decay, z-loss) setting."""
  return f"wd{weight_decay:g}+z{z_loss:g}"


def cells_of(s: dict, choice: dict) -> list[Cell]:
  common = {**ladder.ladder_overrides(s), "diagnostics.every": s["probe_every"],
            "model.readout_multiplier": float(choice["readout_multiplier"]),
            "model.attention_multiplier": float(choice["attention_multiplier"])}
  cells = []
  for width in s["widths"]:
    for wd in s["decays"]:
      for z in s["z_losses"]:
        arm = arm_name(wd, z)
        group = f"{arm.replace('+', '-')}-d{width}"
        o = {**common, "model.d_model": width, "train.weight_decay": wd, "train.z_loss": z}
        cells += [Cell(f"{group}-lr{lr:g}-seed{seed}", {**o, "train.learning_rate": lr,
                                                        "train.seed": seed}, (arm,), seed, group)
                  for lr in s["rates"] for seed in s["seeds"]]
  return cells


def get_sweep(scale: str = "cpu", choice: dict | None = None) -> Sweep:
  s, choice = mutransfer.scale_and_choice(SCALES, scale, choice)
  cells = cells_of(s, choice)
  text = (f"The z-loss probe: the muTransfer ladder's shape ({s['n_layer']} layers, {s['n_head']} "
          f"heads, context {s['block_size']}, batch {s['batch_size']}, vocabulary {s['vocab']}, "
          f"{s['steps']} steps, warmup a tenth, cosine decay to 10 %; sp, pre-LN, readout multiplier "
          f"{choice['readout_multiplier']:g}, attention multiplier {choice['attention_multiplier']:g}) "
          f"at d_model {', '.join(map(str, s['widths']))}; weight decay "
          f"{', '.join(f'{d:g}' for d in s['decays'])} x z-loss {', '.join(f'{z:g}' for z in s['z_losses'])}"
          f" x rates {', '.join(f'{r:g}' for r in s['rates'])}, seeds "
          f"{', '.join(map(str, s['seeds']))}; log Z probed every {s['probe_every']} steps; "
          f"{len(cells)} models in {len({c.group for c in cells})} programs")
  if scale == "cpu":
    text += f", about {ladder.minutes_cpu(cells):.0f} minutes on the 2-core CPU."
  else:
    text = "**Smoke scale: toy models that prove the pipeline; they mean nothing.** " + text + "."
  return Sweep("zloss_probe", scale, s["base"], cells, description=text)
