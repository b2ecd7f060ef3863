"""Read a model's residual stream on a text: figures (PNG) and numbers (JSON) into a folder.

  python -m experiments.inspect --workdir=runs/tiny --text="def fibonacci(n):"
  python -m experiments.inspect --workdir=runs/tiny --compare=runs/tiny-post --text="import os"
  python -m experiments.inspect --hf_dir=path/to/gpt2 --text="The capital of France is"
  python -m experiments.inspect --random=gpt2-small --random_tokens=128   # timing, no weights

Writes into ``--out`` (default ``<workdir>/inspect`` or ``runs/inspect-<name>``):
``lens.png`` (per capture point: loss, KL to the final distribution, top-1 agreement),
``lens_tokens.png`` (capture point x position: the lens's top token and its probability),
``contributions.png`` (per sublayer: |f|/|x|, cos(f, x), direct logit attribution),
``attention_layer<l>.png`` (every head's pattern), ``ablation.png`` (L x H: loss change
with each head zero- or mean-ablated, and each head's direct logit attribution), and ``inspect.json`` with every number plotted plus
compile and run times. With ``--compare`` both models share ``lens.png`` and
``contributions.png``; each model's heatmaps get its name as a prefix. Run it with
``python -m`` (``python experiments/inspect.py`` would shadow the standard ``inspect``).
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags, logging
from matplotlib.figure import Figure

from andrea_jax import errors, files, model
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax import workdir as workdir_lib
from andrea_jax.tools import lens
from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "run directory written by experiments.run")
_HF_DIR = flags.DEFINE_string("hf_dir", None, "a transformers GPT-2 directory (save_pretrained)")
_RANDOM = flags.DEFINE_enum("random", None, ["tiny", "gpt2-small"],
                            "a randomly initialised model of this shape (for timing)")
_COMPARE = flags.DEFINE_string("compare", None, "a second run directory, shown beside the first")
_TEXT = flags.DEFINE_string("text", None, "the text to read (needs the model's tokenizer)")
_RANDOM_TOKENS = flags.DEFINE_integer("random_tokens", None,
                                      "read this many random token ids instead of --text")
_OUT = flags.DEFINE_string("out", None, "output folder (default: <workdir>/inspect)")
_STEP = flags.DEFINE_integer("step", None, "checkpoint step (default: the latest)")
_LAYER = flags.DEFINE_integer("layer", None, "attention maps of this layer only (default: all)")
_ABLATION_BATCH = flags.DEFINE_integer(
    "ablation_batch", 8, "heads ablated at once (vmapped) in the L x H ablation; 0 = all")
_POSITIONS = flags.DEFINE_integer("positions", 24, "last positions shown in lens_tokens.png")

RANDOM_SHAPES = {
    "tiny": dict(vocab_size=2305, block_size=128, d_model=128, n_layer=4, n_head=4),
    "gpt2-small": dict(vocab_size=50257, block_size=1024, d_model=768, n_layer=12, n_head=12),
}


# ----------------------------------------------------------------------------- models and tokens


def load_model(workdir=None, hf_dir=None, random=None, step=None):
  """``(name, params, cfg, tokenizer or None)`` from a run, a transformers dir or a shape."""
  if workdir:
    params, cfg, tok, _ = workdir_lib.load_run(workdir, step)
    return os.path.basename(os.path.normpath(workdir)), params, cfg, tok
  if hf_dir:
    from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
    params, cfg = hf_gpt2.import_gpt2(hf_dir)
    path = os.path.join(hf_dir, "tokenizer.json")
    tok = tokenizer_lib.load(path) if os.path.isfile(path) else None
    return os.path.basename(os.path.normpath(hf_dir)), params, cfg, tok
  cfg = model.ModelConfig(**RANDOM_SHAPES[random])
  return f"random-{random}", model.init_params(cfg, jax.random.key(0)), cfg, None


def token_ids(name, cfg, tok, text, random_tokens):
  """Token ids of the text (or random ids), cropped to the model's context plus one target."""
  if random_tokens:
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, random_tokens + 1)
  elif text is None:
    raise errors.ConfigError("give --text='...' (or --random_tokens=N for random token ids)")
  elif tok is None:
    raise errors.ConfigError(f"{name} has no tokenizer.json for --text: export it with its "
                             f"tokenizer, or pass --random_tokens=N")
  else:
    ids = np.asarray(tokenizer_lib.encode(tok, text))
  if len(ids) < 2:
    raise errors.ConfigError(f"--text={text!r} is {len(ids)} token(s): the lens needs at least 2 "
                             f"(inputs and next-token targets)")
  return ids[-(cfg.block_size + 1):]


def token_labels(tok, ids) -> list[str]:
  if tok is None:
    return [f"#{int(i)}" for i in ids]
  return [repr(tokenizer_lib.decode(tok, [int(i)]))[1:-1] for i in ids]


# ----------------------------------------------------------------------------- the inspection


def _timed(fn, *args):
  """Compile, then run: ``(result as numpy, compile seconds, run seconds)``."""
  started = time.perf_counter()
  compiled = jax.jit(fn).lower(*args).compile()
  compiled_at = time.perf_counter()
  out = jax.block_until_ready(compiled(*args))
  return jax.tree.map(np.asarray, out), compiled_at - started, time.perf_counter() - compiled_at


def inspect_model(params, cfg: model.ModelConfig, ids, ablation_batch: int | None = 8) -> dict:
  """Every number the figures show, for a sequence ``ids`` (inputs ``ids[:-1]``) or a batch.

  ``ids`` is ``(T + 1,)`` or ``(B, T + 1)``; the figures show the first sequence, the means
  in ``summary`` are over all of them.
  """
  ids = np.atleast_2d(ids)
  x, y = jnp.asarray(ids[:, :-1], jnp.int32), jnp.asarray(ids[:, 1:], jnp.int32)
  parts = {
      "capture": lambda p: lens.capture(p, x, cfg, attention=True),
      "logit_lens": lambda p: lens.logit_lens(p, x, y, cfg),
      "ablation_zero": lambda p: lens.head_ablation(p, x, y, cfg, "zero", ablation_batch or None),
      "ablation_mean": lambda p: lens.head_ablation(p, x, y, cfg, "mean", ablation_batch or None),
  }
  if lens.attribution_refusal(cfg) is None:  # else summary records why it is missing
    parts["attribution"] = lambda p: lens.direct_logit_attribution(p, x, y, cfg)
  out, timings = {}, {}
  for name, fn in parts.items():
    out[name], compile_s, run_s = _timed(fn, params)
    timings[name] = {"compile_s": round(compile_s, 3), "run_s": round(run_s, 3)}
  out["timings"] = timings
  return out


def summary(result: dict, cfg: model.ModelConfig, labels: list[str]) -> dict:
  """The JSON-able numbers: means over positions, and the per-position lens table."""
  ll, cap, attr = result["logit_lens"], result["capture"], result.get("attribution")
  mean = lambda a: np.asarray(a, np.float64).mean(axis=(-2, -1)).round(5).tolist()
  # None where the attribution has no linearisation for the model (attribution_missing says why)
  dla = {"direct_logit_attribution": None, "head_attribution_LH": None,
         "embedding_attribution": None, "ln_bias_attribution": None, "target_logit": None}
  if attr is not None:
    dla = {"direct_logit_attribution": mean(attr["sublayers_SBT"]),
           "head_attribution_LH": mean(attr["heads_LHBT"]),
           "embedding_attribution": float(attr["embed_BT"].mean()),
           "ln_bias_attribution": float(attr["bias_BT"].mean()),
           "target_logit": float(attr["logit_BT"].mean())}
  return {
      "config": {k: v for k, v in vars(cfg).items()},
      "tokens": labels,
      "points": lens.point_names(cfg), "sublayers": lens.sublayer_names(cfg),
      "lens": {"loss": mean(ll["nll_PBT"]), "kl_to_final": mean(ll["kl_PBT"]),
               "top1_agreement": mean(ll["agree_PBT"]),
               "top_token_PT": ll["top_PBT"][:, 0].tolist()},
      "contributions": {"relative_norm": mean(cap["rel_norm_SBT"]), "cosine": mean(cap["cos_SBT"]),
                        "stream_norm": mean(cap["norm_PBT"]), **dla},
      "attribution_missing": lens.attribution_refusal(cfg),
      "ablation": {mode: {"baseline_loss": float(result[f"ablation_{mode}"]["baseline"]),
                          "loss_LH": result[f"ablation_{mode}"]["loss_LH"].round(5).tolist()}
                   for mode in lens.ABLATIONS},
      "timings": result["timings"],
  }


# ----------------------------------------------------------------------------- figures


def lens_figure(named: list[tuple[str, dict]]) -> Figure:
  """Per capture point: lens loss, KL to the final distribution, top-1 agreement."""
  fig = Figure(figsize=(13, 3.8), layout="constrained")
  axes = fig.subplots(1, 3)
  for name, s in named:
    points = s["points"]
    for ax, key in zip(axes, ("loss", "kl_to_final", "top1_agreement")):
      ax.plot(range(len(points)), s["lens"][key], "o-", ms=3, label=name)
  for ax, title in zip(axes, ("lens loss (nats)", "KL(final || lens) (nats)",
                              "top-1 agrees with final")):
    ax.set_title(title, fontsize=10)
    points = max((s["points"] for _, s in named), key=len)  # models may differ in depth
    ax.set_xticks(range(len(points)), points, rotation=90, fontsize=7)
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  return fig


def contributions_figure(named: list[tuple[str, dict]]) -> Figure:
  """Per sublayer: |f| / |x|, cos(f, x) and the direct logit attribution, models side by side."""
  fig = Figure(figsize=(13, 3.8), layout="constrained")
  axes = fig.subplots(1, 3)
  width = 0.8 / len(named)
  for i, (name, s) in enumerate(named):
    c = s["contributions"]
    pos = np.arange(len(s["sublayers"])) + (i - (len(named) - 1) / 2) * width
    for ax, key in zip(axes, ("relative_norm", "cosine", "direct_logit_attribution")):
      if c[key] is not None:  # no attribution for some placements (attribution_missing)
        ax.bar(pos, c[key], width, label=name)
  for ax, title in zip(axes, ("|f| / |x| (what it adds vs what it reads)", "cos(f, x)",
                              "direct logit attribution (correct token)")):
    ax.set_title(title, fontsize=10)
    sublayers = max((s["sublayers"] for _, s in named), key=len)
    ax.set_xticks(range(len(sublayers)), sublayers, rotation=90, fontsize=7)
    ax.axhline(0, color="gray", lw=0.5)
    ax.grid(alpha=0.3, axis="y")
  axes[0].legend(fontsize=8)
  return fig


def lens_tokens_figure(result: dict, s: dict, tok, positions: int) -> Figure:
  """Capture point x position: the lens's top token (text) on its probability (colour)."""
  prob_PT = result["logit_lens"]["top_prob_PBT"][:, 0, -positions:]
  top_PT = result["logit_lens"]["top_PBT"][:, 0, -positions:]
  P, T = prob_PT.shape
  fig = Figure(figsize=(max(6, 0.55 * T + 2), max(3, 0.32 * P + 1.5)), layout="constrained")
  ax = fig.subplots()
  im = ax.imshow(prob_PT, aspect="auto", cmap="Blues", vmin=0, vmax=1)
  ax.grid(False)
  labels = token_labels(tok, top_PT.ravel())
  for k, label in enumerate(labels):
    p, t = divmod(k, T)
    ax.text(t, p, label[:6], ha="center", va="center", fontsize=6,
            color="white" if prob_PT[p, t] > 0.6 else "black")
  ax.set_yticks(range(P), s["points"], fontsize=7)
  ax.set_xticks(range(T), s["tokens"][:-1][-positions:], rotation=90, fontsize=7)
  ax.set_xlabel("input token (the lens predicts the next one)")
  fig.colorbar(im, ax=ax, label="top-token probability")
  return fig


def attention_figure(probs_BHTS, layer: int, labels: list[str]) -> Figure:
  """Every head's attention pattern of one layer (rows: queries, columns: keys)."""
  H = probs_BHTS.shape[1]
  cols = min(H, 4)
  rows = -(-H // cols)
  fig = Figure(figsize=(3.2 * cols, 3.2 * rows), layout="constrained")
  axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
  T = probs_BHTS.shape[-1]
  for h, ax in enumerate(axes):
    if h >= H:
      ax.set_axis_off()
      continue
    ax.imshow(probs_BHTS[0, h], cmap="viridis", vmin=0, vmax=1)
    ax.grid(False)
    ax.set_title(f"layer {layer} head {h}", fontsize=9)
    if T <= 24:
      ax.set_xticks(range(T), labels[:T], rotation=90, fontsize=6)
      ax.set_yticks(range(T), labels[:T], fontsize=6)
  return fig


def ablation_figure(s: dict) -> Figure:
  """L x H heatmaps: loss change with each head alone ablated (zero, mean), and its DLA."""
  L = len(s["ablation"]["zero"]["loss_LH"])
  fig = Figure(figsize=(15, 0.4 * L + 2.5), layout="constrained")
  panels = [(f"{mode} ablation: loss - {s['ablation'][mode]['baseline_loss']:.3f}",
             np.asarray(s["ablation"][mode]["loss_LH"]) - s["ablation"][mode]["baseline_loss"],
             "nats") for mode in lens.ABLATIONS]
  if s["contributions"]["head_attribution_LH"] is not None:
    panels.append(("direct logit attribution per head", np.asarray(
        s["contributions"]["head_attribution_LH"]), "logit"))
  for ax, (title, values, unit) in zip(fig.subplots(1, len(panels)), panels):
    lim = max(float(np.abs(values).max()), 1e-6)
    im = ax.imshow(values, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set(title=title, xlabel="head", ylabel="layer")
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.grid(False)
    fig.colorbar(im, ax=ax, label=unit)
  return fig


def write_figures(out_dir: str, prefix: str, result: dict, s: dict, tok, layer, positions):
  paths = []
  save = lambda fig, name: (fig.savefig(os.path.join(out_dir, prefix + name), dpi=110),
                            paths.append(prefix + name))
  save(lens_tokens_figure(result, s, tok, positions), "lens_tokens.png")
  save(ablation_figure(s), "ablation.png")
  probs = result["capture"]["probs_LBHTS"]
  for l in ([layer] if layer is not None else range(probs.shape[0])):
    save(attention_figure(probs[l], l, s["tokens"][:-1]), f"attention_layer{l}.png")
  return paths


# ----------------------------------------------------------------------------- main


def _check_sources():
  given = [n for n, v in (("--workdir", _WORKDIR.value), ("--hf_dir", _HF_DIR.value),
                          ("--random", _RANDOM.value)) if v]
  if len(given) != 1:
    raise errors.ConfigError(f"give exactly one of --workdir, --hf_dir, --random (got "
                             f"{', '.join(given) or 'none'})")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  _check_sources()
  purpose = "for the figures (default: <workdir>/inspect)"
  if _OUT.value:  # before any model is read
    files.check_directory(_OUT.value, "--out", purpose)
  started = time.perf_counter()
  sources = [load_model(_WORKDIR.value, _HF_DIR.value, _RANDOM.value, _STEP.value)]
  if _COMPARE.value:
    sources.append(load_model(_COMPARE.value, step=_STEP.value))
  out_dir = _OUT.value or (os.path.join(_WORKDIR.value, "inspect") if _WORKDIR.value
                           else os.path.join("runs", f"inspect-{sources[0][0]}"))
  files.make_directory(out_dir, "--out", purpose)
  named, written = [], []
  for i, (name, params, cfg, tok) in enumerate(sources):
    if _LAYER.value is not None and not 0 <= _LAYER.value < cfg.n_layer:
      raise errors.ConfigError(f"--layer={_LAYER.value}: {name} has layers 0..{cfg.n_layer - 1}")
    ids = token_ids(name, cfg, tok, _TEXT.value, _RANDOM_TOKENS.value)
    result = inspect_model(params, cfg, ids, _ABLATION_BATCH.value)
    s = summary(result, cfg, token_labels(tok, ids))
    if s["attribution_missing"]:
      print(f"{name}: no direct logit attribution ({s['attribution_missing']})")
    if any(name == n for n, _ in named):
      name = f"{name}-{i}"
    named.append((name, s))
    prefix = f"{name}_" if len(sources) > 1 else ""
    written += write_figures(out_dir, prefix, result, s, tok, _LAYER.value, _POSITIONS.value)
    t = s["timings"]
    print(f"{name}: {len(ids) - 1} tokens, {cfg.n_layer} layers x {cfg.n_head} heads; "
          f"compile {sum(v['compile_s'] for v in t.values()):.1f} s, "
          f"run {sum(v['run_s'] for v in t.values()):.1f} s")
  lens_figure(named).savefig(os.path.join(out_dir, "lens.png"), dpi=110)
  contributions_figure(named).savefig(os.path.join(out_dir, "contributions.png"), dpi=110)
  with open(os.path.join(out_dir, "inspect.json"), "w", encoding="utf-8") as f:
    json.dump({name: s for name, s in named}, f, indent=1)
  print(f"wrote lens.png, contributions.png, {', '.join(written)} and inspect.json to {out_dir} "
        f"({time.perf_counter() - started:.1f} s in all)")


if __name__ == "__main__":
  cli.run(main)
