"""Every notebook in notebooks/ runs top to bottom, and is committed without outputs.

Each notebook is executed in a fresh ``python3`` kernel with ``notebooks/`` as its working
directory (its first cell finds the repository one level up and moves there), the way a
user opens it. A cell that raises fails the test with the cell and its traceback. One test
per notebook, so ``pytest -n 2`` runs two at a time. ``ANDREA_RUNS_DIR`` points the
notebooks' outputs (``runs/`` for a user) at the test's temporary directory, and the test
checks that the checkout holds no new file afterwards. A notebook with a cell tagged
``parameters`` (papermill's convention) runs under test with the values of ``PARAMETERS``,
set in a cell inserted after that one; the user's run keeps the notebook's own.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

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
# Caches and environments that Python and the tools keep; anything else new in the checkout is a leak.
CACHES = {".git", "__pycache__", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", ".venv", "venv"}


def checkout_files() -> dict[str, int | None]:
  """Every path under the repository root (caches aside), with the mtime of git-ignored files.

  A notebook may not create a path, nor rewrite an ignored file (say under ``runs/``,
  where a leak would be invisible to ``git status``). Tracked and untracked files are
  compared by name only, so edits made to the checkout meanwhile do not count.
  """
  found = {}
  for root, dirs, files in os.walk(REPO_ROOT):
    dirs[:] = [d for d in dirs if d not in CACHES]
    found.update({os.path.join(root, name): None for name in dirs + files})
  try:
    ignored = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "-z"],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=False).stdout
  except FileNotFoundError:  # no git: new paths are still caught
    ignored = ""
  for rel in filter(None, ignored.split("\0")):
    path = os.path.join(REPO_ROOT, rel)
    if path in found:
      found[path] = os.stat(path).st_mtime_ns
  return found


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
  before = checkout_files()
  nb = nbformat.read(path, as_version=4)
  if path.stem in PARAMETERS:
    nb = with_parameters(nb, PARAMETERS[path.stem])
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
  client.execute()  # raises CellExecutionError (with the cell and traceback) on an error
  written = sorted(os.path.relpath(p, REPO_ROOT) for p, mtime in checkout_files().items()
                   if p not in before or before[p] != mtime)
  assert not written, (f"{path.name} wrote {len(written)} paths into the checkout (write under "
                       f"$ANDREA_RUNS_DIR instead): {written[:20]}")
