"""The coordinate check (Tensor Programs V): coordinate sizes after a few Adam steps, by width.

  python -m experiments.coord_check                       # sp and mup, widths 32 .. 512
  python -m experiments.coord_check --widths=32,64,128 --parametrizations=mup
  python -m experiments.coord_check --norm=post --qk_norm --json=runs/coord_check.json
  python -m experiments.coord_check --readout_multiplier=1 --attention_multiplier=1   # the untuned base

For each parametrisation it prints, per quantity (the residual stream after the embedding
and each sublayer, each branch's output, the attention and output logits, at init and as
the updates moved them: see ``andrea_jax/tools/coord_check.py``), its size at every width, its
slope in log-log and muP's predicted slope, then the verdict: ``flat`` (no slope more than
0.25 above muP's, muP's promise), ``grows`` (one more than 0.5 above, the standard
parametrisation at a fixed learning rate) or ``unclear``. ``--json`` also writes
every number to a file. The muP base width is the narrowest width unless ``--base_width``;
``--readout_multiplier`` and ``--attention_multiplier`` set the base model's multipliers, the
same at every width; by default the muP base stage's choice (``choice`` in
``results/mup_base-cpu/results.json``: readout 8, attention 1), 1 where that file has none.
"""

from __future__ import annotations

import json

from absl import flags, logging

from andrea_jax import configdict
from andrea_jax import errors
from andrea_jax import model
from andrea_jax import step as step_lib
from andrea_jax.files import read_json
from andrea_jax.tools import coord_check
from experiments import cli
from research import ladder as ladder_lib

_WIDTHS = flags.DEFINE_list("widths", ["32", "64", "128", "256", "512"], "d_model of each rung")
_PARAMETRIZATIONS = flags.DEFINE_list("parametrizations", ["sp", "mup"], "sp and/or mup")
_BASE_WIDTH = flags.DEFINE_integer("base_width", None, "muP's base width (default: the narrowest)")
_STEPS = flags.DEFINE_integer("steps", 5, "Adam updates before measuring (0: the sizes at init alone)")
_LR = flags.DEFINE_float("learning_rate", 1e-2, "the constant learning rate, the same at every width")
_BATCH = flags.DEFINE_integer("batch_size", 8, "sequences in the one training batch")
_SEED = flags.DEFINE_integer("seed", 0, "init seed (the batch is drawn from seed + 1)")
_N_LAYER = flags.DEFINE_integer("n_layer", 2, "blocks at every width")
_N_HEAD = flags.DEFINE_integer("n_head", 4, "heads at every width (d_head grows with width)")
_NORM = flags.DEFINE_enum("norm", "pre", list(model.NORMS), "norm placement")
_QK_NORM = flags.DEFINE_bool("qk_norm", False, "LayerNorm on queries and keys")
_READOUT = flags.DEFINE_float("readout_multiplier", None, "the base model's readout multiplier "
                              "(mup.py; default: the muP base stage's choice)")
_ATTENTION = flags.DEFINE_float("attention_multiplier", None, "the base model's attention "
                                "multiplier (default: the muP base stage's choice)")
_JSON = flags.DEFINE_string("json", None, "write every size and slope to this JSON file")


def table(name: str, result: dict) -> str:
  """One parametrisation's sizes, slopes (and muP's prediction) and verdict, as printed."""
  widths = result["widths"]
  lines = [f"{name}: {coord_check.verdict(result)}",
           f"  {'quantity':<24}" + "".join(f"{w:>10}" for w in widths) + f"{'slope':>8}{'muP':>6}"]
  for q, values in result["sizes"].items():
    lines.append(f"  {q:<24}" + "".join(f"{v:>10.3g}" for v in values)
                 + f"{result['slopes'][q]:>+8.2f}{coord_check.mup_slope(q):>+6.1f}")
  return "\n".join(lines)


def parse_widths(raw: list[str]) -> list[int]:
  if not all(w.strip().isdigit() and int(w) > 0 for w in raw):
    raise errors.ConfigError(f"--widths={','.join(raw)}: expected positive integers, e.g. "
                             f"--widths=32,64,128")
  widths = [int(w) for w in raw]
  if len(set(widths)) < 2:
    raise errors.ConfigError(f"--widths={','.join(raw)}: a slope needs at least two different "
                             f"widths, e.g. --widths=32,64,128")
  return widths


def base_multipliers(readout: float | None, attention: float | None,
                     path: str = ladder_lib.BASE_RESULTS) -> dict[str, float]:
  """The base model's multipliers: those given, else the muP base stage's choice in ``path``
  (1 where it has made none)."""
  choice = (read_json(path) or {}).get("choice") or {}
  return {name: value if value is not None else float(choice.get(name, 1.0))
          for name, value in (("readout_multiplier", readout), ("attention_multiplier", attention))}


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # optax logs the constant schedule at INFO
  t = configdict.group(step_lib.TrainConfig)
  t.update(steps=_STEPS.value, learning_rate=_LR.value, batch_size=_BATCH.value, seed=_SEED.value)
  ladder = coord_check.Ladder(n_layer=_N_LAYER.value, n_head=_N_HEAD.value)
  widths = parse_widths(_WIDTHS.value)
  multipliers = base_multipliers(_READOUT.value, _ATTENTION.value)
  print("base multipliers: " + ", ".join(f"{k} {v:g}" for k, v in multipliers.items()), flush=True)
  results = {}
  for p in _PARAMETRIZATIONS.value:
    results[p] = coord_check.coord_check(widths, p, t, _BASE_WIDTH.value, ladder,
                                         norm=_NORM.value, qk_norm=_QK_NORM.value,
                                         **multipliers)
    print(table(p, results[p]), flush=True)
  if _JSON.value:
    with open(_JSON.value, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  cli.run(main)
