"""``python -m jax_gather bench``: jax_gather against its peers on the same machine, same run.

Each shape is timed against jnp, onnxruntime, OpenVINO and NumPy in paired rounds, and reported
as the median per-round ratio jax_gather / best peer with its interval and an A/A control; an
overhead section times small calls, and ``--grid`` times every op over a grid of sizes against
jnp. The modules, each using only those listed before it:

- :mod:`~jax_gather.bench.cases`: the shapes and their inputs
- :mod:`~jax_gather.bench.timing`: paired rounds, and the statistics of their ratios
- :mod:`~jax_gather.bench.peers`: the contenders of a case
- :mod:`~jax_gather.bench.report`: the printed table and its verdicts
- :mod:`~jax_gather.bench.measure`: one case's row of results, and the run over the cases
- :mod:`~jax_gather.bench.overhead`, :mod:`~jax_gather.bench.grid`: the other two sections
- :mod:`~jax_gather.bench.machine`, :mod:`~jax_gather.bench.chart`: the machine; the bar chart
- :mod:`~jax_gather.bench.command`: the ``bench`` command

onnxruntime, OpenVINO and matplotlib are imported where they are used: the package imports
without them.
"""

from jax_gather.bench.cases import CASES, Case, make_inputs
from jax_gather.bench.chart import plot
from jax_gather.bench.command import main
from jax_gather.bench.machine import describe_machine
from jax_gather.bench.measure import run, run_case
from jax_gather.bench.peers import PEERS, SAME_PROGRAM, import_openvino
from jax_gather.bench.report import format_table
from jax_gather.bench.timing import CONFIDENCE, SETTLE_S, median_interval, paired, paired_rounds

__all__ = [
    "CASES",
    "CONFIDENCE",
    "PEERS",
    "SAME_PROGRAM",
    "SETTLE_S",
    "Case",
    "describe_machine",
    "format_table",
    "import_openvino",
    "main",
    "make_inputs",
    "median_interval",
    "paired",
    "paired_rounds",
    "plot",
    "run",
    "run_case",
]
