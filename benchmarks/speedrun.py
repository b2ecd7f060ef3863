"""The CPU speedrun (issue 70): the wall-clock seconds and the tokens each recipe needs to reach
a target validation loss, on the built-in corpus at a fixed CPU shape.

  python -m benchmarks.speedrun                   # the published run: results/benchmarks/speedrun.json
  python -m benchmarks.speedrun --quick --out=/tmp/speedrun_quick.json   # its pieces at a toy shape, 1-2 min
  python -m benchmarks.speedrun --rounds=5 --target=4.8 --modern=train.learning_rate=0.02

The recipes (``RECIPES``), each trained from scratch in a fresh process of its own, the three
alternating round by round (``rounds.process_rounds``: each goes first equally often), on the
same token stream (the same prepared shards, the same batch of every step, the same validation
batches), at the same shape, steps and batch:

- ``nanogpt``: nanoGPT's recipe in andrea_jax: AdamW, warmup and cosine, learned positions,
  GELU (the config's defaults: ``python -m experiments.run`` trains it);
- ``modern``: Muon (Q, K and V orthogonalised apart, the default), WSD, rotary positions, ReLU
  squared and QK-norm in andrea_jax;
- ``peer``: the PyTorch peer of the step benchmark (``peer.py``: ``transformers``' GPT-2 of our
  shape, eager float32) on nanoGPT's recipe: ``torch.optim.AdamW`` with nanoGPT's decay groups,
  clipping, and our schedule's rate at every update.

Ours train through the repository's own engine (``train.train_and_evaluate``); the peer through
``peer.peer_train``. Every evaluation records the tokens so far and the training seconds: the
wall time of the steps alone, compilation and the evaluations left out (modded-nanogpt's
``training_time_ms`` stops its clock for validation the same way; ours: ``workdir.Clock``'s
``train_time_s``). A recipe's tokens and seconds to the target are the first at which its
validation loss reaches it, linearly interpolated between the evaluation before and the one
at or below it (``to_target``, ``research.curves.first_reach``); a run that never reaches it
says so.

It prints a table (per recipe: the seconds to target, median over rounds with its range and
spread, the tokens, both as ratios to the peer's, paired by round) and writes the JSON, the
table (``<name>_tables.md``) and a plot of the validation loss against seconds and tokens
(``<name>.png``) beside ``--out``, with the CPU, the commit and the load (``uptime`` first). A
busy machine's figures stay out of ``results/benchmarks/`` (``results.refusal``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import rounds as rounds_lib

ROOT = rounds_lib.ROOT


@dataclasses.dataclass(frozen=True)
class Recipe:
  """A recipe: who trains it (``andrea_jax`` or ``peer``), what it is, and its config settings
  over the shape's (``peer`` reads nanoGPT's: it runs that recipe)."""
  side: str
  what: str
  settings: str


# The rates are carried, not tuned here: the muon-cpu study's fitted optima at d128
# (docs/studies/muon-cpu/REPORT.md: AdamW 0.003, Muon 0.011 with the Adam branch at the same rate).
NANOGPT = "train.learning_rate=3e-3"
RECIPES = {
    "nanogpt": Recipe("andrea_jax", "nanoGPT's: AdamW, cosine, learned positions, GELU", NANOGPT),
    "modern": Recipe("andrea_jax", "Muon (Q, K, V apart), WSD, rotary positions, ReLU^2, QK-norm",
                     "train.optimizer='muon',train.learning_rate=1e-2,train.schedule='wsd',"
                     "position='rope',activation='relu2',qk_norm=True"),
    "peer": Recipe("peer", "the PyTorch peer (transformers GPT-2) on nanoGPT's recipe", NANOGPT),
}
# What every recipe shares: the tiny config's shape (d128, 4 layers of 4 heads, context 128,
# vocabulary 2305) at 16 sequences a step, its evaluations every 25 steps on 4 fixed batches,
# no checkpoint but the last, no samples. The target: nanoGPT's recipe reached 4.6 at about step
# 275 of 400 (4.44 at its end) in a calibration run (2026-12-07, commit 6f65802), a margin for the
# peer's own initialisation.
SHAPE = ("train.batch_size=16,train.steps=400,train.warmup_steps=40,train.eval_every=25,"
         "train.eval_batches=4,train.log_every=25,checkpoint.every=400,"
         "checkpoint.every_seconds=0,sample.num_samples=0")
TARGET = 4.6
# --quick: the same pieces at a toy shape and a slice of the corpus, in a minute or two.
QUICK = ("n_layer=2,d_model=64,n_head=2,block_size=64,vocab_size=512,data.max_docs=300,"
         "train.batch_size=8,train.steps=60,train.warmup_steps=6,train.eval_every=10,"
         "train.eval_batches=2,train.log_every=10,checkpoint.every=60,"
         "checkpoint.every_seconds=0,sample.num_samples=0")
QUICK_TARGET = 5.6
DEFAULT_OUT = os.path.join(ROOT, "results", "benchmarks", "speedrun.json")


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs (or by ``flag_values``), so importing the
  module defines none."""
  d = dict(flag_values=fv)
  flags.DEFINE_bool("quick", False, "the pieces at a toy shape (QUICK), 1 round: a minute or two", **d)
  flags.DEFINE_list("recipes", list(RECIPES), f"the recipes to run, of {', '.join(RECIPES)}", **d)
  flags.DEFINE_integer("rounds", None, "rounds, each recipe once a round (default 3; --quick 1)",
                       lower_bound=1, **d)
  flags.DEFINE_float("target", None, f"the target validation loss, nats/token (default {TARGET}; "
                     f"--quick {QUICK_TARGET})", **d)
  flags.DEFINE_string("settings", "", "config settings over the shape's for every recipe, e.g. "
                      "'train.steps=600' (benchmarks/shapes.py: load_config)", **d)
  flags.DEFINE_string("nanogpt", "", "settings added to nanoGPT's recipe (and the peer's)", **d)
  flags.DEFINE_string("modern", "", "settings added to the modern recipe, e.g. "
                      "'train.learning_rate=0.02'", **d)
  flags.DEFINE_string("allocator", "auto", "the allocator both sides run under alike (LD_PRELOAD): "
                      "auto (what an experiments command preloads), system, tcmalloc, mimalloc or "
                      "a path", **d)
  flags.DEFINE_string("cache_dir", "runs/cache", "the prepared data's cache (data.cache_dir)", **d)
  flags.DEFINE_float("settle_s", 2.0, "pause between two processes", lower_bound=0, **d)
  flags.DEFINE_float("max_load", 0.5, "refuse to write into results/benchmarks/ when the 1-minute "
                     "load average before starting is above this", **d)
  flags.DEFINE_bool("force", False, "measure on a busy machine (never into results/benchmarks/)", **d)
  flags.DEFINE_string("out", "", f"the results JSON; its table and plot beside it (default "
                      f"{os.path.relpath(DEFAULT_OUT, ROOT)}; --quick: none, name one)", **d)
  flags.DEFINE_enum("child", None, list(RECIPES), "internal: train one recipe in this process "
                    "and print RESULT <json>", **d)
  flags.DEFINE_string("plan", "", "internal, with --child: the plan the parent wrote", **d)
  flags.DEFINE_string("workdir", "", "internal, with --child: where the run trains", **d)


def flag_values(args: list[str]) -> flags.FlagValues:
  """The command's flags parsed from ``args`` into fresh FlagValues (the tests call it so)."""
  fv = flags.FlagValues()
  define_flags(fv)
  fv(["benchmarks.speedrun", *args])
  return fv


# ----------------------------------------------------------------------------- the recipes


def recipe_config(name: str, shape: str, settings: str = "", extra: dict | None = None,
                  cache_dir: str = "runs/cache"):
  """Recipe ``name``'s experiment config: the tiny config with ``shape``, the recipe's own
  settings, ``settings`` (every recipe's) and ``extra[name]`` (``--nanogpt``, ``--modern``; the
  peer takes nanoGPT's), its data cache at ``cache_dir`` made absolute (the children run from
  the repository's root)."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  from experiments.configs import common  # pylint: disable=import-outside-toplevel
  own = (extra or {}).get("nanogpt" if name == "peer" else name, "")
  config = shapes.load_config("tiny", ",".join(filter(None, (shape, RECIPES[name].settings,
                                                               settings, own))))
  return common.apply_overrides(config, {"data.cache_dir": os.path.abspath(cache_dir)})


# What the peer's model and step can mirror: transformers' GPT-2 under AdamW (peer.py).
PEER_MODEL = {"norm": "pre", "norm_type": "layernorm", "position": "learned",
              "activation": "gelu_tanh", "bias": True, "tie_embeddings": True, "qk_norm": False,
              "dropout": 0.0, "parametrization": "sp", "embedding_norm": False, "depth_rule": "none",
              "attention_multiplier": 1.0, "embedding_multiplier": 1.0, "readout_multiplier": 1.0}
PEER_TRAIN = {"optimizer": "adamw", "z_loss": 0.0, "grad_accum_steps": 1, "init_from": ""}


def peer_refusal(config) -> str | None:
  """Why the peer cannot run ``config`` (a setting GPT-2 under AdamW has not), or None."""
  wrong = [f"model.{k}={config.model[k]!r}" for k, v in PEER_MODEL.items() if config.model[k] != v]
  wrong += [f"train.{k}={config.train[k]!r}" for k, v in PEER_TRAIN.items() if config.train[k] != v]
  if not wrong:
    return None
  return (f"the peer runs GPT-2 under AdamW (benchmarks/peer.py) and cannot mirror "
          f"{', '.join(wrong)}: leave these out of --settings and --nanogpt, or drop the peer "
          f"from --recipes")


def check(fv: flags.FlagValues) -> dict:
  """Refuse, before anything runs, what names nothing (one line each); the recipes' configs."""
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  unknown = [r for r in fv.recipes if r not in RECIPES]
  if unknown or not fv.recipes or len(set(fv.recipes)) < len(fv.recipes):
    raise app.UsageError(f"--recipes={','.join(fv.recipes)}: expected some of {', '.join(RECIPES)}, "
                         f"each once")
  target = target_of(fv)
  if not target > 0:
    raise app.UsageError(f"--target={target}: expected a validation loss above 0 (nats/token)")
  try:
    rounds_lib.allocator_paths(fv.allocator)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  extra = {"nanogpt": fv.nanogpt, "modern": fv.modern}
  configs = {r: recipe_config(r, QUICK if fv.quick else SHAPE, fv.settings, extra, fv.cache_dir)
             for r in fv.recipes}
  for name, config in configs.items():
    config_lib.run_config(config)  # a bad value is the config's own one-line error
    why = peer_refusal(config) if name == "peer" else None
    if why:
      raise app.UsageError(why)
  return configs


def target_of(fv: flags.FlagValues) -> float:
  return fv.target if fv.target is not None else QUICK_TARGET if fv.quick else TARGET


# ----------------------------------------------------------------------------- one recipe, one process


def ours_curve(config, workdir: str) -> dict:
  """Train ``config`` with the repository's engine in ``workdir``: its evaluations (step,
  tokens, training seconds, validation loss) and its status."""
  from andrea_jax import metrics  # pylint: disable=import-outside-toplevel
  from andrea_jax import train  # pylint: disable=import-outside-toplevel
  result = train.train_and_evaluate(config, workdir)
  curve = [{"step": r["step"], "tokens": r["tokens"], "seconds": r["train_time_s"],
            "val_loss": r["val_loss"]} for r in metrics.read_metrics(workdir) if "val_loss" in r]
  return {"curve": curve, "status": result.status, "n_params": result.summary.get("n_params")}


def peer_curve(config, plan: dict) -> dict:
  """Train the peer on ``config``'s shape and nanoGPT's recipe, on the shards ``plan`` names,
  each update at ``plan``'s rate (our schedule's, computed by the parent): its evaluations."""
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import loader as loader_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import shards  # pylint: disable=import-outside-toplevel
  from benchmarks import peer, shapes  # pylint: disable=import-outside-toplevel
  missing = peer.peer_available()
  if missing:
    return {"skipped": missing}
  t = config_lib.run_config(config).train
  cfg = shapes.model_config(config, config.model.block_size, platform="cpu")
  val = loader_lib.eval_batches(shards.TokenStream(plan["val_paths"]), t.eval_batches,
                                t.batch_size, cfg.block_size)
  with loader_lib.Loader(plan["train_paths"], t.batch_size, cfg.block_size,
                         config.data.shuffle_seed, process_index=0, process_count=1,
                         prefetch=config.data.prefetch) as batches:
    curve = peer.peer_train(cfg, t, batches, val, plan["lrs"])
  return {"curve": curve, "status": "completed"}


def child(fv: flags.FlagValues) -> None:
  """``--child``: train one recipe in this fresh process; print ``RESULT <json>``."""
  with open(fv.plan, encoding="utf-8") as f:
    plan = json.load(f)
  config = recipe_config(fv.child, plan["shape"], plan["settings"], plan["extra"], plan["cache_dir"])
  if RECIPES[fv.child].side == "peer":
    got = peer_curve(config, plan)
  else:
    got = ours_curve(config, fv.workdir)
  print("RESULT " + json.dumps(got), flush=True)


def run_child(name: str, plan_path: str, workdir: str, preload: str) -> dict:
  """Recipe ``name`` in a fresh process (``preload`` in ``LD_PRELOAD``): its result and the
  process's whole wall time (start, compilation, evaluations and all)."""
  start = time.perf_counter()
  got = rounds_lib.result_of([sys.executable, "-m", "benchmarks.speedrun", f"--child={name}",
                              f"--plan={plan_path}", f"--workdir={workdir}"], preload)
  shutil.rmtree(workdir, ignore_errors=True)
  return {**got, "process_s": time.perf_counter() - start}


def write_plan(path: str, fv: flags.FlagValues, configs: dict) -> dict:
  """Prepare the data once (every child finds it cached) and write what the children read:
  the settings, the shards, and the peer's rate at every update (our schedule, computed here
  so that the peer's process never starts JAX)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import prepare as prepare_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import schedule  # pylint: disable=import-outside-toplevel
  base = config_lib.run_config(next(iter(configs.values())))
  prepared = prepare_lib.prepare(base)
  plan = {"shape": QUICK if fv.quick else SHAPE, "settings": fv.settings,
          "extra": {"nanogpt": fv.nanogpt, "modern": fv.modern},
          "cache_dir": os.path.abspath(fv.cache_dir),  # the children run from the repository's root
          "train_paths": list(prepared.train_paths), "val_paths": list(prepared.val_paths)}
  if "peer" in configs:
    t = config_lib.run_config(configs["peer"]).train
    plan["lrs"] = np.asarray(schedule.for_config(t)(np.arange(t.steps))).tolist()
  with open(path, "w", encoding="utf-8") as f:
    json.dump(plan, f)
  return plan


# ----------------------------------------------------------------------------- the summary


def to_target(curve: list[dict], target: float) -> dict | None:
  """The tokens and seconds at which ``curve`` (a run's evaluations in order) first reaches
  ``target``, each linear between the evaluation before and the one at or below it
  (``curves.first_reach``, the studies' reading too); None where it never does."""
  from research import curves  # pylint: disable=import-outside-toplevel
  at = {k: curves.first_reach([(p[k], p["val_loss"]) for p in curve], target)
        for k in ("tokens", "seconds")}
  return at if math.isfinite(at["seconds"]) else None


def summarise(rounds: list[dict], target: float, max_spread: float = 0.10) -> dict:
  """Per recipe: its tokens and seconds to ``target`` in each round (``to_target``),
  the median over rounds with the range and spread (``(max - min) / median``), its best loss;
  beside the peer (where it ran), the ratios paired by round: seconds (with the geometric
  mean's 95 % t interval, ``rounds.ratio_interval``) and tokens, below 1 where it is sooner."""
  names = list(dict.fromkeys(n for r in rounds for n in r))
  reached = {n: [to_target(r[n]["curve"], target) if "curve" in r.get(n, {}) else None
                 for r in rounds] for n in names}
  out = {}
  for n in names:
    got = [x for x in reached[n] if x]
    row = {"rounds": len(rounds), "reached": len(got),
           "best_loss": min((p["val_loss"] for r in rounds for p in r.get(n, {}).get("curve", ())),
                            default=None),
           "process_s": [r[n]["process_s"] for r in rounds if "process_s" in r.get(n, {})],
           "errors": [r[n].get("error") or r[n].get("skipped") for r in rounds
                      if "curve" not in r.get(n, {})]}
    if got:
      seconds = [x["seconds"] for x in got]
      centre = statistics.median(seconds)
      row.update(seconds=centre, seconds_range=(min(seconds), max(seconds)),
                 spread=(max(seconds) - min(seconds)) / centre, round_seconds=seconds,
                 tokens=statistics.median(x["tokens"] for x in got),
                 round_tokens=[x["tokens"] for x in got])
      row["agrees"] = row["spread"] < max_spread
    if n != "peer" and "peer" in reached:
      pairs = [(x, p) for x, p in zip(reached[n], reached["peer"]) if x and p]
      if pairs:
        paired = [x["seconds"] / p["seconds"] for x, p in pairs]
        row.update(seconds_ratio=statistics.median(paired), seconds_ratio_range=(min(paired), max(paired)),
                   tokens_ratio=statistics.median(x["tokens"] / p["tokens"] for x, p in pairs),
                   **rounds_lib.ratio_interval(paired, max_spread))
    out[n] = row
  return out


def markdown(results: dict) -> str:
  """The speedrun's table, the machine, the command and the load above it."""
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  s, target = results["recipes"], results["target"]
  lines = [f"Load: `{results['uptime']}`", "", *results_lib.header_lines(results), "",
           f"Target: validation loss {target:g} nats/token; {results['rounds']} rounds, each recipe "
           f"in a fresh process, alternating. Seconds: the training steps' wall time, compilation "
           f"and evaluations left out; tokens and seconds interpolated between evaluations.", "",
           "| recipe | what | seconds to target, median [range] (spread) | tokens to target | "
           "seconds / peer's, median [range] | seconds / peer's, geometric mean [95 % CI] | "
           "tokens / peer's | best loss | process wall s (all in) |", "|---" * 9 + "|"]
  for name, r in s.items():
    if "seconds" in r:
      sec = (f"{r['seconds']:,.1f} [{r['seconds_range'][0]:,.1f}, {r['seconds_range'][1]:,.1f}] "
             f"({100 * r['spread']:.0f} %" + ("" if r["agrees"] else ", over the limit") + ")")
      if r["reached"] < r["rounds"]:
        sec += f"; reached in {r['reached']} of {r['rounds']} rounds"
      tok = f"{r['tokens']:,.0f}"
    else:
      sec, tok = "not reached" + (f" ({'; '.join(map(str, r['errors']))})" if r["errors"] else ""), "n/a"
    ratio = (f"{r['seconds_ratio']:.2f}x [{r['seconds_ratio_range'][0]:.2f}, "
             f"{r['seconds_ratio_range'][1]:.2f}]" if "seconds_ratio" in r else "n/a" if name != "peer" else "1")
    mean = (f"{r['ratio_mean']:.2f}x [{r['ratio_ci95'][0]:.2f}, {r['ratio_ci95'][1]:.2f}]"
            + ("" if r["ratio_decided"] else ", too wide") if "ratio_ci95" in r else
            f"{r['ratio_mean']:.2f}x" if "ratio_mean" in r else "n/a" if name != "peer" else "1")
    tokens = f"{r['tokens_ratio']:.2f}x" if "tokens_ratio" in r else "n/a" if name != "peer" else "1"
    best = f"{r['best_loss']:.3f}" if r["best_loss"] is not None else "n/a"
    wall = f"{statistics.median(r['process_s']):,.0f}" if r["process_s"] else "n/a"
    lines.append(f"| {name} | {RECIPES[name].what} | {sec} | {tok} | {ratio} | {mean} | {tokens} | "
                 f"{best} | {wall} |")
  lines += ["", f"Load at the end: `{results.get('uptime_at_end', 'n/a')}`"]
  return "\n".join(lines) + "\n"


def plot(results: dict, path: str) -> str:
  """The validation loss against training seconds and against tokens, every recipe's every
  round, the target dashed: ``path`` (PNG)."""
  from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
  fig = Figure(figsize=(11, 4.2))
  axes = fig.subplots(1, 2, sharey=True)
  colours = dict(zip(RECIPES, ("tab:blue", "tab:orange", "tab:gray")))
  for name in results["recipes"]:
    for i, rnd in enumerate(results["per_round"]):
      curve = rnd.get(name, {}).get("curve")
      if not curve:
        continue
      reached = to_target(curve, results["target"])
      for ax, key, scale in ((axes[0], "seconds", 1.0), (axes[1], "tokens", 1e-6)):
        ax.plot([p[key] * scale for p in curve], [p["val_loss"] for p in curve], "o-", ms=2.5,
                lw=1, alpha=0.8, color=colours[name], label=name if i == 0 else None)
        if reached:  # where the reading puts it
          ax.plot(reached[key] * scale, results["target"], "x", ms=8, color=colours[name])
  for ax, xlabel in ((axes[0], "training seconds (compilation and evaluations left out)"),
                     (axes[1], "tokens (millions)")):
    ax.axhline(results["target"], color="black", ls="--", lw=0.8, label=f"target {results['target']:g}")
    ax.set(xlabel=xlabel)
    ax.grid(alpha=0.3)
  axes[0].set(ylabel="validation loss (nats/token)", title="to the target, by the clock")
  axes[1].set(title="to the target, by tokens")
  axes[0].legend()
  fig.suptitle(f"CPU speedrun: {results['cpu']} ({results['cores']} cores), load {results['load_at_start']:.2f}",
               fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  return path


def write(results: dict, out: str) -> str:
  """The JSON at ``out``, its table (``<name>_tables.md``) and plot (``<name>.png``) beside it;
  returns the table."""
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  text = markdown(results)
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  results_lib.write_results(results, out, text)
  plot(results, os.path.splitext(out)[0] + ".png")
  return text


# ----------------------------------------------------------------------------- the command


def uptime() -> str:
  """``uptime``'s line (the load, as the machine reports it), else the load averages."""
  try:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(fv: flags.FlagValues, configs: dict, sleep=time.sleep) -> dict:
  """The run: the data prepared once, then ``--rounds`` rounds of every recipe in its own
  process, alternating; the results with their summary."""
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  line = uptime()
  print(line, flush=True)  # the load first
  load = os.getloadavg()[0]
  out = fv.out or ("" if fv.quick else DEFAULT_OUT)
  why = results_lib.refusal(out, load, fv.max_load, fv.force)
  if why:
    raise app.UsageError(why)
  n_rounds = fv.rounds or (1 if fv.quick else 3)
  results = {**results_lib.run_record("benchmarks.speedrun", None, load), "uptime": line,
             "target": target_of(fv), "rounds": n_rounds, "quick": fv.quick,
             "recipes_run": {n: dataclasses.asdict(RECIPES[n]) for n in fv.recipes}}
  preload = rounds_lib.allocator_paths(fv.allocator)[fv.allocator]
  work = tempfile.mkdtemp(prefix="speedrun-")
  try:
    plan_path = os.path.join(work, "plan.json")
    write_plan(plan_path, fv, configs)
    results["config"] = {n: c.to_dict() for n, c in configs.items()}
    progress = lambda i, rnd: print(f"round {i + 1}/{n_rounds}: " + "; ".join(
        f"{n} {reading(rnd[n], results['target'])}" for n in rnd), flush=True)
    results["per_round"] = rounds_lib.process_rounds(
        tuple(fv.recipes), lambda n: run_child(n, plan_path, os.path.join(work, n), preload),
        n_rounds, fv.settle_s, sleep, progress)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  results["recipes"] = summarise(results["per_round"], results["target"])
  results["uptime_at_end"], results["load_at_end"] = uptime(), os.getloadavg()[0]
  text = write(results, out) if out else markdown(results)
  print(text, flush=True)
  if out:
    print(f"wrote {out}, its table and its plot beside it", flush=True)
  return results


def reading(got: dict, target: float) -> str:
  """One recipe's round in a phrase: its seconds and tokens to the target, or why not."""
  if "curve" not in got:
    return got.get("error") or got.get("skipped") or "no result"
  x = to_target(got["curve"], target)
  best = min(p["val_loss"] for p in got["curve"])
  return (f"{x['seconds']:.1f} s, {x['tokens']:,.0f} tokens" if x else f"not reached (best {best:.3f})")


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  if fv.child:
    import jax  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_platforms", "cpu")  # a CPU benchmark, on any machine
    child(fv)
    return 0
  configs = check(fv)
  measure(fv, configs)
  return 0


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=wrong-import-position
  cli.run(main)
