"""Execute the notebooks in this folder and save them with their outputs.

    python notebooks/run_all.py          # every notebook
    python notebooks/run_all.py 02       # only those whose file name contains "02"

Each notebook runs top to bottom in a fresh kernel of the Python running this script (so run it
with the environment where jax_gather is installed, ``pip install -e ".[test]"``), with this
folder as the working directory, and is saved in place, with consecutive prints of a cell
joined into one output and without execution timestamps (they change on every run and mean
nothing to a reader). ``tests/test_notebooks.py`` uses :func:`execute` to run the same
notebooks without saving them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
KERNEL_NAME = "jax-gather-notebooks"

# Seconds each notebook may take in all, kernel start excluded.
TIMEOUTS = {"01_semantics.ipynb": 120, "02_in_jax_programs.ipynb": 120, "03_performance.ipynb": 300}
DEFAULT_TIMEOUT = 120


def notebooks() -> list[Path]:
    return sorted(HERE.glob("*.ipynb"))


def _kernel_manager(spec_dir: str) -> KernelManager:
    """A kernel manager whose only kernel is ipykernel on this very interpreter.

    An installed kernelspec named "python3" may point at another Python (a user-wide one, say),
    so the kernel is described here with ``sys.executable`` rather than looked up by name.
    """
    kernel_dir = Path(spec_dir) / KERNEL_NAME
    kernel_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    (kernel_dir / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[spec_dir])
    if os.name == "nt":
        return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)
    # Unix sockets in the temporary folder rather than TCP on localhost: private to this user.
    sockets = str(Path(spec_dir) / "kernel")
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, transport="ipc", ip=sockets)


def inject(nb: nbformat.NotebookNode, parameters: dict[str, object]) -> None:
    """Puts a cell that assigns ``parameters`` right after the cell tagged ``parameters``.

    Papermill's convention: the tagged cell holds the notebook's defaults, the injected cell
    (tagged ``injected-parameters``) overrides them, and every later cell sees the new values.
    """
    tagged = [k for k, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", [])]
    if len(tagged) != 1:
        found = len(tagged)
        raise ValueError(f"parameters {sorted(parameters)} need one cell tagged 'parameters'; found {found}")
    cell = nbformat.v4.new_code_cell("\n".join(f"{name} = {value!r}" for name, value in parameters.items()))
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(tagged[0] + 1, cell)


def execute(
    path: Path, timeout: float | None = None, parameters: dict[str, object] | None = None
) -> nbformat.NotebookNode:
    """Runs the notebook at ``path`` in a fresh kernel and returns it with its outputs.

    ``parameters`` override the values of the notebook's cell tagged ``parameters`` (see
    :func:`inject`). Raises ``nbclient.exceptions.CellExecutionError`` at the first cell that
    fails, and ``TimeoutError`` when the cells together take longer than ``timeout`` seconds (by
    default the notebook's entry in ``TIMEOUTS``).
    """
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    if parameters:
        inject(nb, parameters)
    budget = timeout if timeout is not None else TIMEOUTS.get(path.name, DEFAULT_TIMEOUT)
    deadline = None

    def remaining(cell) -> int:
        # nbclient asks before each cell how long that cell may run: what is left of the budget.
        nonlocal deadline
        if deadline is None:
            deadline = time.monotonic() + budget
        return max(1, int(deadline - time.monotonic()))

    with tempfile.TemporaryDirectory() as spec_dir:
        client = NotebookClient(
            nb,
            km=_kernel_manager(spec_dir),
            timeout_func=remaining,
            record_timing=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute(cleanup_kc=True)  # the manager is ours: shut its kernel down at the end
    return nb


def merge_streams(nb: nbformat.NotebookNode) -> None:
    """Joins each cell's consecutive stdout (or stderr) outputs into one, as Jupyter shows them."""
    for cell in nb.cells:
        merged = []
        for output in cell.get("outputs", []):
            previous = merged[-1] if merged else None
            if (
                output.output_type == "stream"
                and previous is not None
                and previous.output_type == "stream"
                and previous.name == output.name
            ):
                previous.text += output.text
            else:
                merged.append(output)
        if "outputs" in cell:
            cell.outputs = merged


def main(argv: list[str]) -> int:
    # Figures should be embedded in the notebook whatever backend this shell asks for.
    os.environ.pop("MPLBACKEND", None)
    chosen = [p for p in notebooks() if not argv or any(a in p.name for a in argv)]
    if not chosen:
        print(f"no notebook in {HERE} matches {argv}", file=sys.stderr)
        return 1
    for path in chosen:
        start = time.perf_counter()
        nb = execute(path)
        merge_streams(nb)
        nbformat.write(nb, path)
        print(f"{path.name}: executed and saved in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
