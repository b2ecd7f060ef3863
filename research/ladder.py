"""The width ladder several studies train: its shared overrides, its group names and its measured cost on the 2-core CPU.

At the cpu scale (``CPU``): two layers, two heads (``d_head`` grows with the width), context 64,
16 sequences a step, a 512-token vocabulary, 200 steps.
"""

from __future__ import annotations

import os

from andrea_jax import errors
from andrea_jax.files import read_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The muP base stage's chosen readout and attention multipliers, which the studies on the tuned
# base carry to every width (read by path, not a study imported).
BASE_RESULTS = os.path.join(ROOT, "results", "mup_base-cpu", "results.json")

# Seconds per model-step of one group member by width, and one program's fixed cost (start, data,
# compiles, evaluations, checkpoint), measured in the cpu study's 20 programs (mean over its five
# arms; a shared machine); 256: one 7-member, 40-step program.
SECONDS_PER_MODEL_STEP_CPU = {16: 0.0084, 32: 0.0108, 64: 0.0231, 128: 0.0529, 256: 0.19}
SECONDS_PER_GROUP_CPU = 32.0
W, L, B = "model.d_model", "model.n_layer", "train.batch_size"


def seconds_per_model_step(o) -> float:
  """The ladder's measured cost at the width, scaled with the layers and the batch."""
  return SECONDS_PER_MODEL_STEP_CPU[o[W]] * o[L] / 2 * o[B] / 16


# Scale records (``ladder_overrides``' ``s``); smoke proves the pipeline. A study adds its ``extra``.
CPU = dict(n_layer=2, n_head=2, block_size=64, vocab=512, batch_size=16, steps=200,
           eval_batches=16, log_every=25, extra={})
SMOKE = dict(n_layer=1, n_head=2, block_size=32, vocab=321, batch_size=8, steps=12,
             eval_batches=2, log_every=4, extra={"data.max_docs": 40})


def ladder_overrides(s: dict) -> dict:
  """The overrides every cell of a width ladder at scale ``s`` shares."""
  return {"model.n_layer": s["n_layer"], "model.n_head": s["n_head"], "model.block_size": s["block_size"],
          "model.vocab_size": s["vocab"], "model.norm": "pre", "model.init": "gpt2", "model.mlp_ratio": 4.0,
          "model.activation": "gelu_tanh", "train.batch_size": s["batch_size"], "train.steps": s["steps"],
          "train.warmup_steps": s["steps"] // 10, "train.eval_every": s["steps"],
          "train.eval_batches": s["eval_batches"], "train.log_every": s["log_every"],
          "checkpoint.every": s["steps"], "checkpoint.keep": 1,
          # Probes at step 0 and at the end: attention-logit maxima and log Z.
          "diagnostics.enabled": True, "diagnostics.every": s["steps"],
          "diagnostics.early_steps": 0, "sample.num_samples": 0, **s["extra"]}


def base_choice(path: str = BASE_RESULTS) -> dict:
  """The base stage's choice (its results.json ``choice``); an error says how to make it."""
  results = read_json(path)
  choice = (results or {}).get("choice")
  if not choice:
    raise errors.ConfigError(
        f"{path}: no base-stage choice{' (its rule chose none)' if results else ''}. Run the "
        f"base stage first: python -m experiments.sweep --sweep=mup_base --scale=cpu, then "
        f"python -m experiments.report --sweep_dir=runs/sweeps/mup_base-cpu "
        f"--pack=results/mup_base-cpu --out=docs/studies/mup_base-cpu, and commit it")
  return choice


def base_multipliers(path: str = BASE_RESULTS, ones: bool = False) -> dict:
  """The base stage's multipliers as the overrides every arm on the tuned base shares
  (``ones``: 1 and 1, the untuned base, for toy scales)."""
  choice = {"readout_multiplier": 1.0, "attention_multiplier": 1.0} if ones else base_choice(path)
  return {"model.readout_multiplier": float(choice["readout_multiplier"]),
          "model.attention_multiplier": float(choice["attention_multiplier"])}
