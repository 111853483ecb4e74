"""The notebooks in notebooks/ run top to bottom without error, and are committed executed.

Each notebook is run by ``execute`` from ``notebooks/run_all.py`` (the script that also saves
them): a fresh ipykernel on this very Python, the notebooks folder as the working directory,
and a time budget per notebook. The executed copy stays in memory; the files are never
rewritten here. After changing a notebook or the library, ``python notebooks/run_all.py``
re-executes and saves them.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXPECTED = ("01_semantics.ipynb", "02_in_jax_programs.ipynb", "03_performance.ipynb")
FOUND = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))
# The benchmark of notebook 03 with one paired round rather than five, over the cases named
# gather_nd (two shapes and an overhead row) rather than all: its cells all run (the command,
# the table, the figure) in a quarter of the time; the timings themselves, and every case, are
# bench's tests' to judge (tests/test_bench.py).
PARAMETERS = {"03_performance.ipynb": {"rounds": 1, "only": "gather_nd"}}


def _load_runner():
    spec = importlib.util.spec_from_file_location("notebooks_run_all", NOTEBOOKS / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_all = _load_runner()


def _code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_the_expected_notebooks_are_there():
    missing = [name for name in EXPECTED if name not in FOUND]
    assert not missing, f"notebooks missing from {NOTEBOOKS}: {missing} (found {FOUND})"


def test_the_kernel_runs_this_python(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    nbformat.write(nb, tmp_path / "which_python.ipynb")
    executed = run_all.execute(tmp_path / "which_python.ipynb", timeout=60)
    printed = executed.cells[0].outputs[0].text.strip()
    assert Path(printed).resolve() == Path(sys.executable).resolve()


def test_parameters_override_the_tagged_cell_for_every_later_cell(tmp_path):
    defaults = nbformat.v4.new_code_cell("rounds = None\nlabel = 'saved'")
    defaults.metadata["tags"] = ["parameters"]
    new_cell = nbformat.v4.new_code_cell
    cells = [new_cell("rounds = 'before'"), defaults, new_cell("print(rounds, label)")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "parameters.ipynb")
    executed = run_all.execute(tmp_path / "parameters.ipynb", timeout=60, parameters={"rounds": 1})
    assert executed.cells[-1].outputs[0].text == "1 saved\n"
    untagged = tmp_path / "untagged.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells[:1]), untagged)
    with pytest.raises(ValueError, match="one cell tagged 'parameters'; found 0"):
        run_all.execute(untagged, timeout=60, parameters={"rounds": 1})


@pytest.mark.parametrize("name", PARAMETERS)
def test_each_notebook_given_parameters_names_them_in_its_tagged_cell(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    (tagged,) = [cell for cell in nb.cells if "parameters" in cell.metadata.get("tags", [])]
    for parameter in PARAMETERS[name]:
        assert re.search(rf"^{parameter} = ", tagged.source, re.MULTILINE), (name, parameter, tagged.source)


@pytest.mark.parametrize("name", FOUND)
def test_notebook_is_committed_with_its_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    counts = [cell.execution_count for cell in _code_cells(nb)]
    assert None not in counts, f"{name}: some code cells were never executed: {counts}"
    assert counts == list(range(1, len(counts) + 1)), (
        f"{name}: cells were not executed once, top to bottom, in one kernel: {counts}"
    )
    for k, cell in enumerate(_code_cells(nb), start=1):
        for output in cell.outputs:
            assert output.output_type != "error", f"{name}, code cell {k}: saved with an error"
            assert output.get("name") != "stderr", (
                f"{name}, code cell {k}: saved with output on stderr (a warning?):\n{output.text}"
            )


@pytest.mark.slow
@pytest.mark.parametrize("name", FOUND)
def test_notebook_executes_without_error(name):
    # Raises CellExecutionError, with the failing cell and its traceback, at the first error.
    executed = run_all.execute(NOTEBOOKS / name, parameters=PARAMETERS.get(name))
    counts = [cell.execution_count for cell in _code_cells(executed)]
    assert None not in counts
