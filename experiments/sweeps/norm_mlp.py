"""Norm placement x warmup, and the MLP expansion ratio (fixed width and parameter-matched).

  python -m experiments.sweep --sweep=norm_mlp --scale=cpu     # ~45 min on 2 CPU cores
  python -m experiments.sweep --sweep=norm_mlp --scale=gpu     # andrea120m shape
  python -m experiments.report --sweep_dir=runs/sweeps/norm_mlp-cpu

Arms (every arm at every seed):
- ``norm:{pre,post}/{warmup,no-warmup}``: the same model with pre- or post-LN, with a
  linear warmup or none, at a learning rate high enough for the difference to show.
- ``mlp_width:{1,2,4,8}``: pre-LN, GELU, mlp_ratio r at fixed d_model (the model grows with r).
- ``swiglu``: SwiGLU at r = 8/3, parameter-matched to GELU at r = 4.
- ``mlp_matched:{1,2,4,8}``: mlp_ratio r with d_model chosen so the non-embedding
  parameter count stays that of r = 4 (Kaplan et al. count non-embedding parameters).
"""

from __future__ import annotations

import math

from andrea_jax import errors

from experiments.sweeps.base import Cell, Sweep, merge

SCALES = {
    # A small ANDREA on the built-in corpus: 6 layers, d_model 128, 128-token context.
    "cpu": dict(base="tiny", n_layer=6, d_model=128, n_head=4, block_size=128, batch_size=16,
                steps=300, learning_rate=3e-3, warmup_steps=60, eval_every=50, diag_every=50,
                seeds=(0, 1)),
    # The andrea120m shape on one GPU.
    "gpu": dict(base="andrea120m", n_layer=12, d_model=768, n_head=12, block_size=1024,
                batch_size=64, steps=2000, learning_rate=1.5e-3, warmup_steps=200,
                eval_every=200, diag_every=200, seeds=(0, 1)),
}


def matched_d_model(ratio: float, d_model: int, n_head: int) -> int:
  """d_model with ``(4 + 2 r) d^2`` equal to that of r = 4 at ``d_model``, a multiple of n_head."""
  d = d_model * math.sqrt(12.0 / (4.0 + 2.0 * ratio))
  return max(n_head, int(round(d / n_head)) * n_head)


def get_sweep(scale: str = "cpu") -> Sweep:
  if scale not in SCALES:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(SCALES)}")
  s = SCALES[scale]
  common = {"model.n_layer": s["n_layer"], "model.d_model": s["d_model"],
            "model.n_head": s["n_head"], "model.block_size": s["block_size"],
            "train.batch_size": s["batch_size"], "train.steps": s["steps"],
            "train.learning_rate": s["learning_rate"], "train.warmup_steps": s["warmup_steps"],
            "train.eval_every": s["eval_every"], "checkpoint.every": s["steps"],
            "diagnostics.enabled": True, "diagnostics.every": s["diag_every"],
            "sample.num_samples": 0,
            # Spelled out in every cell so identical cells merge (see base.merge).
            "model.norm": "pre", "model.mlp_ratio": 4.0, "model.activation": "gelu_tanh"}
  cells = []
  for seed in s["seeds"]:
    add = lambda name, arm, **o: cells.append(Cell(
        f"{name}-seed{seed}", {**common, **o, "train.seed": seed}, (arm,), seed))
    for norm in ("pre", "post"):
      for warm in ("warmup", "no-warmup"):
        add(f"{norm}-{warm}", f"norm:{norm}/{warm}", **{"model.norm": norm},
            **({} if warm == "warmup" else {"train.warmup_steps": 0}))
    for r in (1, 2, 4, 8):
      add(f"pre-warmup" if r == 4 else f"mlp{r}", f"mlp_width:{r}", **{"model.mlp_ratio": float(r)})
      d = matched_d_model(r, s["d_model"], s["n_head"])
      add(f"pre-warmup" if r == 4 else f"matched{r}", f"mlp_matched:{r}",
          **{"model.mlp_ratio": float(r), "model.d_model": d})
    add("swiglu", "swiglu", **{"model.activation": "swiglu", "model.mlp_ratio": 8 / 3})
  return Sweep("norm_mlp", scale, s["base"], merge(cells), description=(
      f"Base config `{s['base']}` with {s['n_layer']} layers, d_model {s['d_model']}, "
      f"{s['n_head']} heads, context {s['block_size']}, batch {s['batch_size']}, "
      f"{s['steps']} steps, peak learning rate {s['learning_rate']}, warmup "
      f"{s['warmup_steps']} steps where used, cosine decay to 10 %; seeds {list(s['seeds'])} "
      f"(initialisation; the batch order is the same for every cell)."))
