"""Data preparation (tokenizer training, encoding into token shards), ours against a
reference streaming pipeline, each side in a fresh process of its own.

  python -m benchmarks.prepare_throughput --sizes=0.1,1,10 --reference_sizes=0.1,1 \
      --out=results/benchmarks/prepare_throughput.json

Corpora (``build_corpus``): ``--sizes`` GB (decimal) of JSONL, each document a seeded pick of
1-20 paragraphs of the standard library's text (GBs of web-sized documents, not one file
repeated), built once into ``--corpus_dir``. Per size and round, ours first in even rounds:
ours is ``experiments.prepare --config=andrea120m`` on the corpus (``ours_argv``); the
reference (``reference``) trains the same 8449-token byte-level BPE on the first 200 MB,
then encodes 512-document chunks with ``encode_batch``, each document after an EOT, into
100 M-token llm.c shards written as they fill. Each side runs under ``wrap``, a small
process reading its peak RSS and CPU seconds from ``os.wait4`` (``ru_maxrss`` starts at the
parent's peak: exec keeps it, so the parent must not be this benchmark). Printed: MB of text
per second, peak RSS, CPU % (CPU over wall seconds), shards and tokens (from the headers),
ours over the reference's MB/s paired by round, and per side peak RSS = a + b * GB.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from andrea_jax import files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("ours", "reference")
VOCAB_SIZE = 8449  # andrea120m's vocabulary: the reference trains the same size as ours
SAMPLE_BYTES = 200_000_000  # the reference trains its tokenizer on the first 200 MB
CHUNK_DOCS = 512  # documents per encode_batch call
SHARD_TOKENS = 100_000_000  # tokens per llm.c shard (the last one holds the rest)
REPORT_EVERY_S = 10.0  # progress lines where stderr is not a terminal
# The wrapper: this module, absl and andrea_jax.files; no numpy (its RSS is a side's floor).
WRAP = "import sys; from benchmarks import prepare_throughput as p; p.wrap(sys.argv[1:])"


def paragraphs(docs: list[str]) -> list[str]:
  """The pool's paragraphs: blocks between blank lines, the blank ones dropped."""
  return [p for d in docs for p in re.split(r"\n[ \t]*\n", d) if p.strip()]


def build_corpus(gb: float, corpus_dir: str, seed: int = 0, pool: list[str] | None = None) -> dict:
  """Write ``gb`` GB of JSONL documents, streaming (the last one crosses the size), or reuse
  the file its sidecar describes. Returns the sidecar: path, bytes, docs, seed, target."""
  path, target = os.path.join(corpus_dir, f"corpus_{gb:g}GB.jsonl"), round(gb * 1e9)
  sidecar = os.path.splitext(path)[0] + ".json"
  meta = files.read_json(sidecar, fix="delete it: the corpus is rebuilt") or {}
  if (meta.get("target_bytes"), meta.get("seed")) == (target, seed) and os.path.exists(path) \
      and os.path.getsize(path) == meta["bytes"]:
    return meta
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  from andrea_jax import builtin_corpus  # pylint: disable=import-outside-toplevel
  paras = paragraphs(builtin_corpus.builtin_documents() if pool is None else pool)
  rng, written, docs, partial = random.Random(seed), 0, 0, path + ".partial"
  os.makedirs(corpus_dir, exist_ok=True)
  next_report = time.monotonic() + REPORT_EVERY_S
  try:
    with open(partial, "wb", buffering=1 << 20) as f, tqdm(total=target, unit="B", unit_scale=True,
                                                           disable=not sys.stderr.isatty()) as bar:
      while written < target:
        text = "\n\n".join(rng.choices(paras, k=rng.randint(1, 20)))
        line = (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode("utf-8")
        f.write(line)
        written, docs = written + len(line), docs + 1
        bar.update(len(line))
        if bar.disable and time.monotonic() > next_report:
          print(f"{path}: {written / 1e9:.2f} of {target / 1e9:g} GB", file=sys.stderr, flush=True)
          next_report += REPORT_EVERY_S
    os.replace(partial, path)
  finally:
    if os.path.exists(partial):  # interrupted: a partial corpus is never reused
      os.remove(partial)
  meta = {"path": path, "bytes": written, "docs": docs, "seed": seed, "target_bytes": target}
  files.write_json(sidecar, meta)
  return meta


def documents(path: str, max_bytes: int = 0):
  """The ``text`` of each JSONL line of ``path``, read one line at a time; with
  ``max_bytes``, stop after the line that reaches it."""
  seen = 0
  with open(path, "rb") as f:
    for number, line in enumerate(f, 1):
      try:
        yield json.loads(line)["text"]
      except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}:{number}: expected a JSON object with a 'text' field per "
                         f"line; rebuild the corpus with --corpus_dir elsewhere") from None
      seen += len(line)
      if max_bytes and seen >= max_bytes:
        return


def shards_of(chunks, size: int):
  """Cut a stream of token arrays into arrays of exactly ``size`` tokens, then the rest."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  pending, count = [], 0
  for chunk in chunks:
    pending.append(chunk)
    count += chunk.size
    while count >= size:
      flat = np.concatenate(pending)
      yield flat[:size]
      pending, count = [flat[size:]], flat.size - size
  if count:
    yield np.concatenate(pending)


def reference(corpus: str, out_dir: str, vocab_size: int = VOCAB_SIZE,
              shard_tokens: int = SHARD_TOKENS, sample_bytes: int = SAMPLE_BYTES) -> None:
  """The reference pipeline (module docstring): ``tokenizer.json``, ``ref_train_000000.bin``,
  ... in ``out_dir``."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from andrea_jax import shards, tokenizer  # pylint: disable=import-outside-toplevel
  tok = tokenizer.train_tokenizer(documents(corpus, sample_bytes), vocab_size)
  os.makedirs(out_dir, exist_ok=True)
  tokenizer.save(tok, os.path.join(out_dir, "tokenizer.json"))  # as a pipeline keeps it
  eot, docs = tokenizer.eot_id(tok), documents(corpus)

  def token_arrays():
    for chunk in iter(lambda: list(itertools.islice(docs, CHUNK_DOCS)), []):
      flat = []
      for ids in tokenizer.encode_batch(tok, chunk):
        flat.append(eot)
        flat.extend(ids)
      yield np.asarray(flat, dtype=np.uint16)

  for n, tokens in enumerate(shards_of(token_arrays(), shard_tokens)):
    shards.write_shard(os.path.join(out_dir, f"ref_train_{n:06d}.bin"), tokens)


def ours_argv(corpus: str, cache_dir: str) -> list[str]:
  """Our preparation of ``corpus`` into a fresh ``cache_dir``: the command a user runs."""
  return [sys.executable, "-m", "experiments.prepare", "--config=andrea120m",
          f"--config.data.path={corpus}", f"--config.data.cache_dir={cache_dir}"]


def reference_argv(corpus: str, out_dir: str) -> list[str]:
  return [sys.executable, "-m", "benchmarks.prepare_throughput", "--reference",
          f"--corpus={corpus}", f"--out_dir={out_dir}"]


def wrap(argv: list[str]) -> None:
  """Run ``argv`` (its output to stderr); print its exit, wall and CPU seconds and peak RSS."""
  start = time.perf_counter()
  proc = subprocess.Popen(argv, stdout=sys.stderr)
  _, status, usage = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  print(json.dumps({"exit": proc.returncode, "wall_s": time.perf_counter() - start,
                    "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}))


def measured(argv: list[str]) -> dict:
  """``wrap`` of ``argv`` in a new process group, killed with its child if we are stopped
  (Ctrl-C: the terminal's signal reaches only us); an exit other than 0 is an ``error``."""
  with tempfile.TemporaryFile(mode="w+") as log:
    proc = subprocess.Popen([sys.executable, "-c", WRAP, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=log, text=True, start_new_session=True)
    try:
      out, _ = proc.communicate()
    except BaseException:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      raise
    log.seek(0)
    tail = (log.read().strip().splitlines() or [""])[-1][:300]
  got = json.loads(out) if out.strip() else {"exit": proc.returncode}
  return got if got["exit"] == 0 else {"error": f"exit {got['exit']}: {tail}"}


def shard_counts(root: str) -> tuple[int, int]:
  """The llm.c shards (``*.bin``) under ``root`` and their tokens, from the headers only."""
  from andrea_jax import shards  # pylint: disable=import-outside-toplevel
  paths, tokens = sorted(pathlib.Path(root).rglob("*.bin")), 0
  for path in paths:
    with open(path, "rb") as f:
      magic, version, count = struct.unpack("<3i", f.read(12))
    if (magic, version) != (shards.SHARD_MAGIC, shards.SHARD_VERSION):
      raise ValueError(f"{path}: magic {magic} version {version}, not an llm.c token shard")
    tokens += count
  return len(paths), tokens


def run_side(side: str, meta: dict, corpus_dir: str) -> dict:
  """One side on one corpus, into a fresh directory deleted after its shards are counted."""
  out_dir = tempfile.mkdtemp(prefix=f"{side}_", dir=corpus_dir)
  try:
    got = measured((ours_argv if side == "ours" else reference_argv)(meta["path"], out_dir))
    if "error" in got:
      return got
    got["shards"], got["tokens"] = shard_counts(out_dir)
  finally:
    shutil.rmtree(out_dir, ignore_errors=True)
  return {**got, "mb_per_s": meta["bytes"] / 1e6 / got["wall_s"],
          "cpu_pct": 100 * got["cpu_s"] / got["wall_s"]}


def ratios(rounds: list[dict]) -> dict:
  """Ours over the reference's MB/s paired by round; from two rounds, their geometric mean
  with its 95 % t interval, "too wide" over 10 % of the mean (as ``benchmarks.step``'s default)."""
  from benchmarks import rounds as rounds_lib  # pylint: disable=import-outside-toplevel
  paired = [r["ours"]["mb_per_s"] / r["reference"]["mb_per_s"] for r in rounds
            if "mb_per_s" in r.get("ours", {}) and "mb_per_s" in r.get("reference", {})]
  return {"ratios": paired, **(rounds_lib.ratio_interval(paired, 0.10) if len(paired) > 1 else {})}


def growth(rows: list[dict], side: str) -> dict | None:
  """Peak RSS = a + b * GB, least squares over every round's point (None below two sizes)."""
  points = [(r["gb"], x[side]["peak_rss_mb"]) for r in rows for x in r["rounds"]
            if "peak_rss_mb" in x.get(side, {})]
  if len({gb for gb, _ in points}) < 2:
    return None
  slope, intercept = statistics.linear_regression(*zip(*points))
  return {"mb": intercept, "mb_per_gb": slope}


TABLE_HEAD = ["| size | round | side | MB/s | peak RSS (MB) | CPU % | shards | tokens |", "|---" * 8 + "|"]


def table_row(gb: float, round_number: int, side: str, d: dict) -> str:
  """A side's round as a table row (printed as it ends, too)."""
  cells = ([f"{d['mb_per_s']:.2f}", f"{d['peak_rss_mb']:,.0f}", f"{d['cpu_pct']:.0f}",
            str(d["shards"]), f"{d['tokens']:,}"] if "mb_per_s" in d else [d["error"], *[""] * 4])
  return f"| {gb:g} GB | {round_number} | {side} | " + " | ".join(cells) + " |"


def markdown(results: dict) -> str:
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  lines = [*results_lib.header_lines(results), "", *TABLE_HEAD]
  lines += [table_row(row["gb"], i, side, d) for row in results["sizes"]
            for i, rnd in enumerate(row["rounds"], 1) for side, d in rnd.items()]
  lines.append("")
  for row in (r for r in results["sizes"] if r["ratios"]):
    ci = row.get("ratio_ci95")
    mean = (f"; geometric mean {row['ratio_mean']:.2f}x [{ci[0]:.2f}, {ci[1]:.2f}] (95 % t"
            + ("" if row["ratio_decided"] else ", too wide") + ")" if ci else "")
    lines.append(f"- {row['gb']:g} GB, ours / reference MB/s by round: "
                 + ", ".join(f"{r:.2f}x" for r in row["ratios"]) + mean)
  for side, fit in results["growth"].items():
    lines.append(f"- peak RSS, {side}: " + (f"{fit['mb']:,.0f} MB + {fit['mb_per_gb']:,.0f} MB per "
                                            f"GB of text" if fit else "n/a (fewer than two sizes)"))
  return "\n".join(lines) + "\n"


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs, so importing the module defines none."""
  flags.DEFINE_list("sizes", ["0.1", "1", "10"], "corpus sizes, GB of text", flag_values=fv)
  flags.DEFINE_list("sides", list(SIDES), "sides to run: ours, reference", flag_values=fv)
  flags.DEFINE_list("reference_sizes", [], "sizes the reference runs at (empty: all)", flag_values=fv)
  flags.DEFINE_integer("rounds", 1, "rounds per size, the sides alternating", lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("seed", 0, "seed of the corpora's documents", flag_values=fv)
  flags.DEFINE_string("corpus_dir", "runs/bench_corpus", "where corpora and shards go", flag_values=fv)
  flags.DEFINE_string("out", "", "results JSON (tables beside it)", flag_values=fv)
  flags.DEFINE_float("max_load", 0.5, "busiest 1-minute load for results in results/benchmarks/",
                     flag_values=fv)
  flags.DEFINE_bool("force", False, "measure on a busy machine (never into results/benchmarks/)",
                    flag_values=fv)
  flags.DEFINE_bool("reference", False, "run the reference pipeline (child mode)", flag_values=fv)
  flags.DEFINE_string("corpus", "", "--reference: the JSONL corpus", flag_values=fv)
  flags.DEFINE_string("out_dir", "", "--reference: where its shards go", flag_values=fv)


def plan(fv: flags.FlagValues) -> tuple[list[float], set[float], list[str]]:
  """The sizes (increasing), the reference's sizes and the sides; ValueError naming a bad one."""
  bad = ValueError(f"--sizes={','.join(fv.sizes)} --reference_sizes={','.join(fv.reference_sizes)}: "
                   f"expected positive GB, the reference's among --sizes, e.g. --sizes=0.1,1,10")
  try:
    sizes = sorted({float(s) for s in fv.sizes})
    ref = {float(s) for s in fv.reference_sizes} or set(sizes)
  except ValueError:
    raise bad from None
  if not sizes or min(sizes) <= 0 or not ref <= set(sizes):
    raise bad
  if not fv.sides or set(fv.sides) - set(SIDES):
    raise ValueError(f"--sides={','.join(fv.sides)}: expected some of {','.join(SIDES)}")
  return sizes, ref, [s for s in SIDES if s in fv.sides]


def measure(fv: flags.FlagValues) -> int:
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  sizes, ref_sizes, sides = plan(fv)
  load = os.getloadavg()[0]
  why = results_lib.refusal(fv.out, load, fv.max_load, fv.force)
  if why:
    raise ValueError(why)
  out = results_lib.run_record("benchmarks.prepare_throughput", sys.argv[1:], load)  # argv: absl's rest
  out.pop("shapes")
  out["sizes"] = []
  print("\n".join([*results_lib.header_lines(out), "", *TABLE_HEAD]), flush=True)
  for gb in sizes:
    meta = build_corpus(gb, fv.corpus_dir, fv.seed)
    row = {"gb": gb, "bytes": meta["bytes"], "docs": meta["docs"], "rounds": []}
    for r in range(fv.rounds):
      rnd = {}
      for side in sides if r % 2 == 0 else sides[::-1]:
        if side == "ours" or gb in ref_sizes:
          rnd[side] = run_side(side, meta, fv.corpus_dir)
          print(table_row(gb, r + 1, side, rnd[side]), flush=True)
      row["rounds"].append(rnd)
    out["sizes"].append({**row, **ratios(row["rounds"])})
  out["growth"] = {side: growth(out["sizes"], side) for side in sides}
  return results_lib.finish_run(out, markdown(out), fv.out)


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  try:
    if fv.reference:
      reference(fv.corpus, fv.out_dir)
      return 0
    return measure(fv)
  except (OSError, ValueError) as e:  # a bad flag, file or corpus (errors.AndreaError): one line
    print(f"error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print("interrupted: nothing written (--out is written only when every size is done)",
          file=sys.stderr, flush=True)
    return 130


if __name__ == "__main__":
  define_flags()
  app.run(main)
