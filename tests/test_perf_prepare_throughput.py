"""benchmarks/prepare_throughput.py: the corpora, the reference pipeline, the rusage wrapper
and the command line of ours (which is not run here: its pipeline is being rewritten)."""

import json
import os
import signal
import sys
import time

import pytest
from absl import flags

from andrea_jax import corpus, shards, tokenizer
from benchmarks import prepare_throughput as bench

GB = 0.0005  # 500 kB: a corpus of about 200 documents


@pytest.fixture(scope="module")
def pool():
  return corpus.builtin_documents(50)  # the pydoc topics: read in milliseconds


def texts(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line)["text"] for line in f]


def test_a_corpus_is_seeded_reaches_its_size_within_a_document_and_is_reused(tmp_path, pool):
  a = bench.build_corpus(GB, str(tmp_path / "a"), seed=1, pool=pool)
  b = bench.build_corpus(GB, str(tmp_path / "b"), seed=1, pool=pool)
  other = bench.build_corpus(GB, str(tmp_path / "c"), seed=2, pool=pool)
  with open(a["path"], "rb") as f:
    data = f.read()
  with open(b["path"], "rb") as f:
    assert f.read() == data
  assert open(other["path"], "rb").read() != data
  last = data.splitlines(keepends=True)[-1]
  assert a["bytes"] == len(data) and 500_000 <= len(data) < 500_000 + len(last)
  docs = texts(a["path"])
  assert len(docs) == a["docs"] and 500 < len(data) / len(docs) < 20_000  # web-sized: a few kB
  assert os.path.basename(a["path"]) == "corpus_0.0005GB.jsonl"
  # Reused: an empty pool would fail to build one.
  assert bench.build_corpus(GB, str(tmp_path / "a"), seed=1, pool=[])["bytes"] == a["bytes"]
  with open(a["path"], "ab") as f:  # no longer the size its sidecar records: rebuilt
    f.write(b"\n")
  assert bench.build_corpus(GB, str(tmp_path / "a"), seed=1, pool=pool) == a
  with open(a["path"], "rb") as f:
    assert f.read() == data


def test_the_reference_writes_shards_that_decode_to_the_documents_after_eot(tmp_path, pool):
  meta = bench.build_corpus(GB, str(tmp_path), pool=pool)
  out = tmp_path / "ref"
  bench.reference(meta["path"], str(out), vocab_size=300, shard_tokens=1000)
  paths = sorted(out.glob("ref_train_*.bin"))
  counts = [len(shards.read_shard(p)) for p in paths]
  assert paths[0].name == "ref_train_000000.bin" and set(counts[:-1]) == {1000} and counts[-1] <= 1000
  assert bench.shard_counts(str(out)) == (len(paths), sum(counts))
  tok = tokenizer.load(out / "tokenizer.json", 300)
  ids = [int(t) for p in paths for t in shards.read_shard(p)]
  assert tokenizer.decode(tok, ids) == "".join(tokenizer.EOT + d for d in texts(meta["path"]))


def test_the_wrapper_reports_the_child_peak_rss_not_the_benchmark_s(tmp_path):
  ballast = bytearray(100_000_000)  # this process is large; a child's ru_maxrss must not say so
  small = bench.measured([sys.executable, "-c", "pass"])
  big = bench.measured([sys.executable, "-c", "x = bytearray(50_000_000)"])
  assert len(ballast) and small["peak_rss_mb"] < 40 <= 50 <= big["peak_rss_mb"] < 100
  assert big["wall_s"] > 0 and big["cpu_s"] > 0
  failed = bench.measured([sys.executable, "-c", "import sys; sys.exit('no corpus here')"])
  assert failed == {"error": "exit 1: no corpus here"}


def test_an_interrupt_kills_the_child_at_once(tmp_path):
  pid_file = tmp_path / "pid"
  child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

  def interrupt(*_):
    raise KeyboardInterrupt

  previous = signal.signal(signal.SIGALRM, interrupt)
  signal.setitimer(signal.ITIMER_REAL, 1.0)
  try:
    with pytest.raises(KeyboardInterrupt):
      bench.measured([sys.executable, "-c", child])
  finally:
    signal.signal(signal.SIGALRM, previous)
  pid = int(pid_file.read_text())
  deadline, state = time.monotonic() + 5, "R"
  while state != "Z" and time.monotonic() < deadline:  # SIGKILL lands within moments
    try:  # gone, or a zombie waiting for init
      with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
      state = "Z"
    time.sleep(0.05)
  assert state == "Z"


def test_ours_is_the_andrea120m_prepare_command_on_the_corpus_and_a_fresh_cache():
  from experiments.configs import andrea120m  # pylint: disable=import-outside-toplevel
  argv = bench.ours_argv("c/corpus_1GB.jsonl", "/tmp/run1")
  assert argv == [sys.executable, "-m", "experiments.prepare", "--config=andrea120m",
                  "--config.data.path=c/corpus_1GB.jsonl", "--config.data.cache_dir=/tmp/run1"]
  config = andrea120m.get_config()
  assert config.model.vocab_size == bench.VOCAB_SIZE and {"path", "cache_dir"} <= set(config.data)


def test_the_flags_give_sizes_in_order_and_name_a_bad_value():
  fv = flags.FlagValues()
  bench.define_flags(fv)
  fv(["prog", "--sizes=10,0.1,1", "--reference_sizes=0.1,1"])
  assert bench.plan(fv) == ([0.1, 1.0, 10.0], {0.1, 1.0}, ["ours", "reference"])
  for bad, named in [("--sizes=1,big", "--sizes=1,big"), ("--reference_sizes=5", "--reference_sizes=5"),
                     ("--sides=peer", "--sides=peer"), ("--sizes=0", "--sizes=0")]:
    fv.unparse_flags()
    fv(["prog", bad])
    with pytest.raises(ValueError, match=named):
      bench.plan(fv)


def test_the_ratio_is_paired_by_round_and_peak_rss_is_fitted_per_side():
  side = lambda mb_s, rss: {"mb_per_s": mb_s, "peak_rss_mb": rss, "cpu_pct": 150.0, "shards": 1, "tokens": 9}
  small = [{"ours": side(2.0, 300), "reference": side(1.0, 200)},
           {"reference": side(1.1, 210), "ours": side(2.2, 310)}, {"ours": side(2.0, 300)}]
  rows = [{"gb": 0.1, "rounds": small}, {"gb": 1.0, "rounds": [{"ours": side(2.0, 1200)}]}]
  rows = [{**r, **bench.ratios(r["rounds"])} for r in rows]
  assert rows[0]["ratios"] == pytest.approx([2.0, 2.0]) and rows[0]["ratio_mean"] == pytest.approx(2.0)
  assert rows[1]["ratios"] == [] and bench.growth(rows, "reference") is None
  fit = bench.growth(rows, "ours")
  assert fit["mb_per_gb"] == pytest.approx((1200 - 910 / 3) / 0.9)
  text = bench.markdown({"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d",
                         "load_at_start": 0.1, "sizes": rows, "growth": {"ours": fit, "reference": None}})
  assert "| 0.1 GB | 2 | reference | 1.10 | 210 | 150 | 1 | 9 |" in text and "by round: 2.00x, 2.00x" in text
  assert "- peak RSS, reference: n/a" in text
