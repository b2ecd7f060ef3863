"""The step benchmark's measurements, one function per mode of ``python -m benchmarks.step``
(``step.measure`` picks one from the flags and writes what it returns):

- ``--processes=separate``: ``separate_step``, per shape ``--rounds`` rounds of every arm's
  sides (``arm_rounds``: the allocators and ``variants``, each side in a fresh process:
  ``sides.run_child``, ``rounds.py``), and ``separate_parts``;
- ``--processes=one``: ``one_process_step`` (``bench_shape``: our step against the bare
  model step, then against the peer, and the matmul limit) and ``one_process_parts``;
- ``in_this_process``: ``--measure`` ops, unit_axis, compile and generate
  (``bench_generate``), whatever ``--processes`` says.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from absl import flags

from benchmarks import rounds
from benchmarks import sides
from benchmarks.rounds import SIDES

GENERATE = (16, 96)  # prompt and new tokens of --measure=generate


# The norm switches of issue 59 as variants of ours, each against the default pre-LN LayerNorm.
NORM_VARIANTS = {"rmsnorm": "model.norm_type=rmsnorm", "dyt": "model.norm_type=dyt",
                 "post": "model.norm=post", "peri": "model.norm=peri",
                 "reordered": "model.norm=reordered", "deepnorm": "model.norm=deepnorm",
                 "mix": "model.norm=mix", "lns": "model.norm_depth_scaling=True"}


def variants(fv: flags.FlagValues) -> list[str]:
  """``--variant``'s NAME:SETTINGS, then ``NORM_VARIANTS`` under ``--norm_variants``."""
  extra = [f"{name}:{settings}" for name, settings in NORM_VARIANTS.items()] if fv.norm_variants else []
  return list(fv.variant) + extra


def size(name: str, batch: int, seq: int) -> tuple[int, int]:
  """A shape's batch and sequence length: the flags' where given, else the shape's own."""
  from benchmarks import shapes  # pylint: disable=import-outside-toplevel
  b, t = shapes.SHAPE_DEFAULTS.get(name, (16, 128))
  return batch or b, seq or t


# ----------------------------------------------------------------------------- separate processes


def separate_step(fv: flags.FlagValues, out: dict, sleep=time.sleep) -> dict:
  """``--processes=separate --measure=step``: per shape ``--rounds`` rounds of every arm's
  sides, each in a fresh process; a row per shape and arm (``rounds.summarise``)."""
  from benchmarks import matmul_limit  # pylint: disable=import-outside-toplevel
  setup = rounds.arms(rounds.allocator_paths(",".join(fv.allocators)),
                      rounds.variant_settings(variants(fv)), fv.settings)
  out.update({"arms": {a: arm._asdict() for a, arm in setup.items()}, "interleave": fv.interleave})
  limit = fv.limit and out["platform"] == "cpu"
  if limit:
    out["fma"] = matmul_limit.fma_peak()
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    got = arm_rounds(fv, setup, name, batch, seq, sleep)
    limits = (rounds.shape_limits(name, batch, seq, out["fma"], run=lambda kind, *a: sides.run_child(
        kind, *a, device=fv.device)) if limit else None)
    ab = rounds.arm_ab(got, base=next(iter(setup)))
    for a in setup:
      row = {"shape": name, "arm": a, "batch": batch, "seq": seq, "per_round": got[a],
             **rounds.summarise(got[a], batch * seq, fv.max_spread),
             **({"arm_ab": {a: ab[a]}} if a in ab else {})}
      out["shapes"].append(rounds.with_limits(row, limits) if limits else row)
  return out


def arm_rounds(fv, setup: dict, name: str, batch: int, seq: int, sleep) -> dict[str, list[dict]]:
  """Every arm's rounds at one shape: {arm: [{side: its result}, ...]}; a variant of ours
  shares its allocator's peer of the same round."""
  runs = tuple((a, side) for a in setup for side in SIDES if side != "peer" or setup[a].peer)
  one = lambda r: sides.run_child(r[1], name, batch, seq, fv.warmup, fv.steps, setup[r[0]].preload,
                                  setup[r[0]].settings, fv.device, fv.peer_backend)
  say = lambda i, rnd: print(f"{name} round {i + 1}/{fv.rounds}: " + ", ".join(
      f"{s}/{a} {rnd[a, s]['step_s']:.3f} s" if "step_s" in rnd[a, s] else f"{s}/{a} {rnd[a, s]}"
      for a, s in runs), flush=True)
  if fv.interleave == "processes":
    got = rounds.process_rounds(runs, one, fv.rounds, fv.settle_s, sleep, say)
  else:
    start = lambda r: rounds.Live(sides.child_argv(r[1], name, batch, seq, fv.warmup, 1,
                                                   setup[r[0]].settings, fv.device, fv.peer_backend)
                                  + ["--serve"], setup[r[0]].preload)
    step_settle = 0.2 if fv.step_settle_s is None else fv.step_settle_s
    got = []
    for i in range(fv.rounds):
      got.append(rounds.lockstep_round(runs, start, fv.steps, i, step_settle, sleep))
      sleep(fv.settle_s)
      say(i, got[-1])
  out = {a: [] for a in setup}
  for rnd in got:
    by_arm = {a: {s: rnd[a, s] for (arm, s) in runs if arm == a} for a in setup}
    for a in setup:
      if not setup[a].peer:  # a variant of ours: paired with its allocator's peer, same round
        base = a.rsplit("+", 1)[0]
        by_arm[a]["peer"] = {**by_arm[base]["peer"], "shared_with": base}
      out[a].append(by_arm[a])
  return out


def separate_parts(fv: flags.FlagValues, out: dict, sleep=time.sleep) -> dict:
  """``--processes=separate --measure=parts``: per shape, each side's rows in a fresh process
  of its own, alternating; per row the ratio paired by round (``parts.summary``)."""
  from benchmarks import parts, shapes  # pylint: disable=import-outside-toplevel
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    cfg = shapes.model_config(shapes.load_config(name, fv.settings), seq)
    one = lambda side, name=name, batch=batch, seq=seq: sides.run_child(
        SIDES[parts.SIDES.index(side)], name, batch, seq, fv.warmup, fv.steps, settings=fv.settings,
        device=fv.device, measure="parts")
    say = lambda i, rnd, name=name: print(f"{name} round {i + 1}/{fv.rounds}: " + ", ".join(
        f"{side} {sum(rnd[side]['ms'].values()):,.0f} ms over all rows" if "ms" in rnd[side]
        else f"{side} {rnd[side]}" for side in parts.SIDES), flush=True)
    got = rounds.process_rounds(parts.SIDES, one, fv.rounds, fv.settle_s, sleep, say)
    out["shapes"].append({"shape": name, "batch": batch, "seq": seq, "reps": fv.steps,
                          "rounds": len(got), "per_round": got,
                          "good_rounds": sum(all("ms" in r.get(s, {}) for s in parts.SIDES) for r in got),
                          "rows": parts.summary(got, cfg, fv.max_spread)})
  return out


# ----------------------------------------------------------------------------- one process


def one_process_step(fv: flags.FlagValues, out: dict, loadavg=os.getloadavg,
                     clock=time.perf_counter, sleep=time.sleep) -> dict:
  """``--processes=one --measure=step``: per shape, ``bench_shape``, and with ``--memory``
  each side's peak memory from a fresh process (``run_child``)."""
  out.update({"machine": _machine(), "train": []})
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    settle = 0.5 if fv.step_settle_s is None else fv.step_settle_s
    row = bench_shape(name, batch, seq, fv.steps, fv.warmup, fv.settings, fv.device,
                      fv.peer_backend, fv.limit and out["platform"] == "cpu", settle, loadavg,
                      clock, sleep)
    if fv.memory:
      for side, key in (("andrea_jax", "andrea_jax_rss_mb"), ("peer", "peer_rss_mb")):
        got = sides.run_child(side, name, batch, seq, 1, 2, settings=fv.settings, device=fv.device,
                              peer_backend=fv.peer_backend)
        if "peak_rss_mb" in got:
          row[key] = got["peak_rss_mb"]
    out["train"].append(row)
    print(json.dumps(row), flush=True)
  return out


def bench_shape(name: str, batch: int, seq: int, reps: int, warmup: int, settings: str = "",
                device: str = "auto", peer_backend: str = "auto", limit: bool = True,
                settle_s: float = 0.5, loadavg=os.getloadavg, clock=time.perf_counter,
                sleep=time.sleep) -> dict:
  """One shape in two interleaved passes: our step against the model-only step (the step's
  overhead, peer not running), then our step against the peer (the ratio); then the
  matmul limit of this shape on this machine (``matmul_limit``)."""
  import jax  # pylint: disable=import-outside-toplevel
  from andrea_jax import metrics, model  # pylint: disable=import-outside-toplevel
  from benchmarks import matmul_limit as limit_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import ours, shapes, timing  # pylint: disable=import-outside-toplevel
  config = shapes.load_config(name, settings)
  mine = ours.ours_step(config, batch, seq)
  bare = ours.ours_step(config, batch, seq, bare=True)
  cfg = mine.cfg
  before = timing.load_snapshot(loadavg)
  own = timing.interleave({"andrea_jax": mine.run, "model_only": bare.run}, reps, warmup,
                          settle_s=settle_s, clock=clock, sleep=sleep)
  del bare  # its state (parameters and both moments) is not needed any more
  times = {"model_only": own["model_only"], "andrea_jax_beside_model_only": own["andrea_jax"]}
  theirs, _ = sides.build_side("peer", config, batch, seq, device, peer_backend)
  if not isinstance(theirs, dict):
    times.update(timing.interleave({"andrea_jax": mine.run, "peer": theirs.run}, reps, warmup,
                                   settle_s=settle_s, clock=clock, sleep=sleep))
  else:
    times["andrea_jax"] = own["andrea_jax"]
  del mine
  row = {"shape": name, "batch": batch, "seq": seq, "params": model.count_params(cfg),
         "compute_dtype": cfg.compute_dtype, "attention_impl": cfg.attention_impl,
         **timing.load_between(before, timing.load_snapshot(loadavg)),
         **timing.speed_fields(times, batch * seq)}
  if limit:
    got = limit_lib.matmul_limit(cfg, batch, seq, reps, warmup, torch_too="peer" in times,
                                 clock=clock, sleep=sleep)
    row.update({**got, **limit_lib.limit_fields(times, batch * seq, got, model.flops_per_token(cfg, seq),
                                                model.flops_per_token(cfg, seq, causal=True))})
  if isinstance(theirs, dict):
    row["peer_missing"] = theirs["skipped"]
  peak = metrics.peak_flops(jax.devices()[0], model.compute_dtype(cfg))
  for who in ("andrea_jax", "model_only", "peer"):
    if peak and f"{who}_tokens_per_s" in row:
      row[f"{who}_mfu"] = row[f"{who}_tokens_per_s"] * model.flops_per_token(cfg, seq) / peak
  return row


def one_process_parts(fv: flags.FlagValues, out: dict) -> dict:
  """``--processes=one --measure=parts``: every row, both sides in this process."""
  from andrea_jax import step as step_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import parts, shapes  # pylint: disable=import-outside-toplevel
  settle = 0.5 if fv.step_settle_s is None else fv.step_settle_s
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    config = shapes.load_config(name, fv.settings)
    rows = parts.in_process(shapes.model_config(config, seq), batch, seq,
                            step_lib.TrainConfig(**config.train), fv.steps, settle)
    out["shapes"].append({"shape": name, "batch": batch, "seq": seq, "reps": fv.steps, "rows": rows})
  return out


def bench_generate(name: str, prompt_len: int, new_tokens: int, reps: int) -> dict:
  """KV-cache generation of ``new_tokens`` after a ``prompt_len`` prompt: ours against
  ``transformers``' ``generate``, greedy, tokens/s."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from andrea_jax import model, sample  # pylint: disable=import-outside-toplevel
  from benchmarks import peer, shapes, timing  # pylint: disable=import-outside-toplevel
  cfg = shapes.model_config(shapes.load_config(name), prompt_len + new_tokens)
  params = model.init_params(cfg, jax.random.key(0))
  prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, prompt_len), np.int32)
  fns = {"andrea_jax": lambda: np.asarray(sample.generate(params, cfg, prompt, new_tokens,
                                                          jax.random.key(0), temperature=0.0))}
  if peer.peer_available() is None:
    import torch  # pylint: disable=import-outside-toplevel
    net = peer.peer_model(cfg).eval()
    ids = torch.from_numpy(prompt).long()

    def theirs():
      with torch.no_grad():
        return net.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            do_sample=False, use_cache=True, pad_token_id=0)

    fns["peer"] = theirs
  times = timing.interleave(fns, reps, 1)
  row = {"shape": name, "prompt": prompt_len, "new_tokens": new_tokens}
  for who, ts in times.items():
    row[f"{who}_tokens_per_s"] = new_tokens / statistics.median(ts)
  if "peer" in times:
    row["ratio"] = row["andrea_jax_tokens_per_s"] / row["peer_tokens_per_s"]
  return row


def in_this_process(fv: flags.FlagValues, out: dict) -> dict | None:
  """``--measure`` ops, unit_axis (printed), compile or generate (rows in ``out``)."""
  from benchmarks import ours, parts, shapes  # pylint: disable=import-outside-toplevel
  out.update({"machine": _machine(), "train": [], "compile": [], "generate": []})
  for name in fv.shapes:
    batch, seq = size(name, fv.batch, fv.seq)
    config = shapes.load_config(name, fv.settings)
    if fv.measure == "ops":
      print("\n".join(parts.ranked_ops(shapes.model_config(config, seq), batch, seq, fv.top)),
            flush=True)
    elif fv.measure == "unit_axis":
      d = shapes.model_config(config, seq).d_model
      print("\n".join(parts.unit_axis(batch, seq, d, max(fv.steps, 20))), flush=True)
    elif fv.measure == "compile":
      for depth in fv.compile_depths:
        out["compile"].append({"shape": name, "n_layer": int(depth),
                               "scan_s": ours.compile_seconds(config, int(depth), seq, True),
                               "unrolled_s": ours.compile_seconds(config, int(depth), seq, False)})
        print(json.dumps(out["compile"][-1]), flush=True)
    else:
      out["generate"].append(bench_generate(name, *GENERATE, fv.steps))
      print(json.dumps(out["generate"][-1]), flush=True)
  return None if fv.measure in ("ops", "unit_axis") else out


def _machine() -> str:
  from benchmarks import results  # pylint: disable=import-outside-toplevel
  return results.machine()
