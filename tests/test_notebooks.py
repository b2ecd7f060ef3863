"""Every notebook in notebooks/ runs top to bottom, and is committed without outputs.

Each notebook is executed in a fresh ``python3`` kernel with ``notebooks/`` as its working
directory (its first cell finds the repository one level up and moves there), the way a
user opens it. A cell that raises fails the test with the cell and its traceback. One test
per notebook, so ``pytest -n 2`` runs two at a time.
"""

from __future__ import annotations

import json
import pathlib

import pytest

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
# Per cell. Notebook 4 trains for about a minute; the margin is for a machine busy with other tests.
CELL_TIMEOUT_S = 600


def test_the_five_notebooks_exist():
  expected = {"01_residual_stream.ipynb", "02_layernorm_gelu.ipynb", "03_inside_andrea120m.ipynb",
              "04_train_and_sample.ipynb", "05_sweep_results.ipynb"}
  assert expected <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
  nb = json.loads(path.read_text(encoding="utf-8"))
  for i, cell in enumerate(nb["cells"]):
    if cell["cell_type"] == "code":
      assert cell["outputs"] == [] and cell["execution_count"] is None, (
          f"{path.name} cell {i} has outputs: clear them before committing")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  pytest.importorskip("ipykernel")
  # The kernel inherits the environment: no GPU grabbing by a notebook next to the tests.
  monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
  client.execute()  # raises CellExecutionError (with the cell and traceback) on an error
