"""Every notebook in notebooks/ runs top to bottom, and is committed without outputs.

Each notebook is executed in a fresh ``python3`` kernel with ``notebooks/`` as its working
directory (its first cell finds the repository one level up and moves there), the way a
user opens it. A cell that raises fails the test with the cell and its traceback. One test
per notebook, so ``pytest -n 2`` runs two at a time. ``ANDREA_RUNS_DIR`` points the
notebooks' outputs (``runs/`` for a user) at the test's temporary directory, and the test
checks that the notebook wrote nothing into the checkout: what its kernel and every Python
process it starts wrote, recorded by an audit hook (``WRITE_HOOK``), not a comparison of
the checkout before and after, which would read a user training meanwhile as the notebook's
own writes. A notebook with a cell tagged
``parameters`` (papermill's convention) runs under test with the values of ``PARAMETERS``,
set in a cell inserted after that one; the user's run keeps the notebook's own.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
# Per cell. Notebook 4 trains for about a minute; the margin is for a machine busy with other tests.
CELL_TIMEOUT_S = 600
# Notebook 4 on the first 40 documents of the built-in corpus for 10 steps of 8 sequences:
# the whole pipeline (prepare, train, evaluate, checkpoint, reload, sample) without training
# a tokenizer on the whole corpus (minutes) and 100 steps of 32. Notebooks 3 and 6 train their
# toy models for a tenth and a third of their steps (notebook 6's own warmup needs more
# than 40): every cell runs on a trained model all the same (what they show needs the
# full run; no cell asserts on it), in a fraction of the time.
PARAMETERS = {"03_inside_andrea120m": {"STEPS": 20},
              "04_train_and_sample": {"MAX_DOCS": 40, "STEPS": 10, "BATCH_SIZE": 8},
              "06_reading_the_residual_stream": {"STEPS": 50}}
# Notebooks whose training dominates: their kernels compile at XLA's optimisation level 1
# instead of the suite's 0 (tests/conftest.py), which compiles about 1.3x slower and runs
# steps 2-3x faster (notebook 4 under test: 29 s instead of 44 s; notebook 3's training cell
# 38 s instead of 69 s, on this 2-core machine under load). Notebook 6 is not one: its two
# 50-step models train as fast at level 0 (20 s either way, under load) and its inspection,
# a dozen programs per model, compiles in 10 s instead of 23 s (the notebook 62 s -> 47 s).
TRAINING_NOTEBOOKS = {"03_inside_andrea120m", "04_train_and_sample"}
LEVEL_1 = "--xla_backend_optimization_level=1 --xla_llvm_disable_expensive_passes=true"  # the fusion flag stays
# Caches that Python and the tools keep: written by any import, not a leak.
CACHES = ("__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".hypothesis")
# Loaded first by the kernel and by every Python process it starts (a sitecustomize module
# on PYTHONPATH): an audit hook (PEP 578) that appends each path the process opens for
# writing, creates, renames, links or removes to $ANDREA_WRITE_LOG. Writes below Python (a
# C++ library's own files) are not seen; the directories such a library writes into are
# made by Python (orbax's checkpoints, for one), so a leak still shows as their mkdir.
WRITE_HOOK = r"""
import os, sys
_log = os.open(os.environ["ANDREA_WRITE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATHS = {"os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1), "os.symlink": (1,),
          "os.link": (1,), "os.remove": (0,), "os.rmdir": (0,), "os.truncate": (0,)}

def _hook(event, args):
  if event == "open":
    paths = (args[0],) if isinstance(args[2], int) and args[2] & _WRITES else ()
  else:
    paths = tuple(args[i] for i in _PATHS.get(event, ()))
  for path in paths:
    if isinstance(path, (str, bytes, os.PathLike)):
      os.write(_log, (os.path.abspath(os.fsdecode(path)) + "\n").encode("utf-8", "replace"))

sys.addaudithook(_hook)
sys.path[:] = [p for p in sys.path if p != os.path.dirname(os.path.abspath(__file__))]
import importlib.machinery, importlib.util  # then the environment's own sitecustomize, if any
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
if _spec:
  _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
"""


def written_into_checkout(log: pathlib.Path) -> list[str]:
  """The paths under the repository root (caches aside) that ``WRITE_HOOK`` logged and that
  are there now (a library's probe file, made and removed at once, leaves nothing)."""
  paths = set(log.read_text(encoding="utf-8").splitlines()) if log.exists() else set()
  paths = {p for p in paths if os.path.lexists(p)}
  inside = (os.path.relpath(p, REPO_ROOT) for p in paths
            if p == str(REPO_ROOT) or p.startswith(str(REPO_ROOT) + os.sep))
  return sorted(p for p in inside if not any(c in pathlib.Path(p).parts for c in CACHES))


def watch_writes(monkeypatch, directory: pathlib.Path) -> pathlib.Path:
  """Install ``WRITE_HOOK`` for the processes this test starts; returns its log's path."""
  hook = directory / "write_hook"
  hook.mkdir()
  (hook / "sitecustomize.py").write_text(WRITE_HOOK, encoding="utf-8")
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
  monkeypatch.setenv("ANDREA_WRITE_LOG", str(directory / "writes.log"))
  return directory / "writes.log"


def with_parameters(nb, values: dict):
  """``nb`` with a cell after its ``parameters`` cell that sets ``values`` (each a name that
  cell assigns: a renamed parameter fails here instead of being ignored)."""
  nbformat = pytest.importorskip("nbformat")
  tagged = [i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", [])]
  assert len(tagged) == 1, f"expected one cell tagged 'parameters', found {len(tagged)}"
  for name in values:
    assert re.search(rf"^{name} = ", nb.cells[tagged[0]].source, re.M), f"no parameter {name}"
  source = "\n".join(f"{name} = {value!r}" for name, value in values.items())
  nb.cells.insert(tagged[0] + 1, nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]}))
  return nb


def test_the_listed_notebooks_exist():
  expected = {"01_residual_stream.ipynb", "02_layernorm_gelu.ipynb", "03_inside_andrea120m.ipynb",
              "04_train_and_sample.ipynb", "05_sweep_results.ipynb",
              "06_reading_the_residual_stream.ipynb", "07_proxies_across_width.ipynb"}
  assert expected <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
  nb = json.loads(path.read_text(encoding="utf-8"))
  for i, cell in enumerate(nb["cells"]):
    if cell["cell_type"] == "code":
      assert cell["outputs"] == [] and cell["execution_count"] is None, (
          f"{path.name} cell {i} has outputs: clear them before committing")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch, tmp_path):
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  pytest.importorskip("ipykernel")
  # The kernel inherits the environment: no GPU grabbing by a notebook next to the tests.
  monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  monkeypatch.setenv("ANDREA_RUNS_DIR", str(tmp_path / "runs"))
  if path.stem in TRAINING_NOTEBOOKS:
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split()
            if not f.startswith(("--xla_backend_optimization_level", "--xla_llvm_disable_expensive_passes"))]
    monkeypatch.setenv("XLA_FLAGS", " ".join(kept + [LEVEL_1]))
  log = watch_writes(monkeypatch, tmp_path)
  nb = nbformat.read(path, as_version=4)
  if path.stem in PARAMETERS:
    nb = with_parameters(nb, PARAMETERS[path.stem])
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
  client.execute()  # raises CellExecutionError (with the cell and traceback) on an error
  written = written_into_checkout(log)
  assert not written, (f"{path.name} wrote {len(written)} paths into the checkout (write under "
                       f"$ANDREA_RUNS_DIR instead): {written[:20]}")


def test_the_write_log_holds_a_processs_own_writes_not_anothers(monkeypatch, tmp_path):
  """What the hook logs is this process's writes into the checkout; a file another process
  writes meanwhile (a user's run under runs/) is not in it."""
  log = watch_writes(monkeypatch, tmp_path)
  leak = REPO_ROOT / "runs" / f"hook-test-{os.getpid()}"
  other = REPO_ROOT / "runs" / f"hook-test-other-{os.getpid()}"
  code = (f"import os; os.makedirs({str(leak)!r}); open(os.path.join({str(leak)!r}, 'x'), 'w').close(); "
          f"open({str(REPO_ROOT / 'README.md')!r}).read(); open({str(tmp_path / 'ok')!r}, 'w').close()")
  try:
    other.mkdir(parents=True)  # this test's own process, outside the hook: "another" one
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    rel = os.path.relpath(leak, REPO_ROOT)
    assert written_into_checkout(log) == [rel, os.path.join(rel, "x")]
  finally:
    for p in (leak / "x", leak, other):
      if p.is_file():
        p.unlink()
      elif p.exists():
        p.rmdir()
