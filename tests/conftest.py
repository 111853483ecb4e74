import os

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import settings

from jax_gather import _cpu, _cpu_fills, _cpu_split, _fill, _fill_pin

# JAX_GATHER_EXAMPLES=400 pytest draws ten times as many cases as the default run; pytest -m core
# (the fast tier) a quarter as many, unless JAX_GATHER_EXAMPLES says how many.
for profile, examples in [("jax_gather", 40), ("jax_gather_core", 10)]:
    settings.register_profile(
        profile,
        deadline=None,
        print_blob=True,
        max_examples=int(os.environ.get("JAX_GATHER_EXAMPLES", examples)),
    )
settings.load_profile("jax_gather")

# JAX_GATHER_PINNED_FILL=refused: the library's probe of the pinned fill (jax_gather._fill_pin.
# pins_the_fill) answers no, as it does on an Intel Xeon (family 6 model 207, JAX 0.11.2), where
# a select against that fill loses bits: each bfloat16 element is pinned instead. XLA's counts
# are not the CPU's, so CI runs the CPU facts and lowerings this way too, on any CPU (.ci/run).
if os.environ.get("JAX_GATHER_PINNED_FILL") == "refused":
    _fill_pin._xla_cpu_keeps_rows_against_an_opaque_fill = lambda dtype: False


def pytest_configure(config):
    if config.getoption("markexpr") == "core":
        settings.load_profile("jax_gather_core")


def _facts_held(monkeypatch, *facts, answer=True):
    """Each of ``facts`` (functions of jax_gather._cpu, and of jax_gather._cpu_fills and
    _cpu_split where they ask them too) answering ``answer`` while the test runs, the lowerings
    chosen and programs traced with it, and neither kept after."""
    for fact in facts:
        for module in (_cpu, _cpu_fills, _cpu_split):
            if hasattr(module, fact):
                monkeypatch.setattr(module, fact, lambda *asked: answer)
    yield from _chosen_afresh(monkeypatch)


def _chosen_afresh(monkeypatch):
    """The lowerings chosen and programs traced afresh with what ``monkeypatch`` set, and
    neither kept after it is undone."""
    _cpu._choose.cache_clear()
    jax.clear_caches()
    yield
    monkeypatch.undo()
    _cpu._choose.cache_clear()
    jax.clear_caches()


@pytest.fixture
def lowerings_on_any_cpu(monkeypatch):
    """The lowerings that rest on a fact of the CPU or of JAX's release chosen as where it holds
    (XLA:CPU widening indices in the loop of a column gather, and computing a batched GatherND's
    linear indices in vector instructions, which it does with AVX-512; splitting loops into
    tasks, which it does on two cores or more; copying rows in bytes with vector instructions,
    which it does through JAX 0.10), and the column pad's loop as one XLA:CPU does not leave scalar
    (it does on the AMD EPYC): for what they compute and what XLA makes of them, which do not
    depend on the CPU."""
    for module in (_cpu, _cpu_fills):
        monkeypatch.setattr(module, "xla_scalarises_the_column_pad", lambda: False)
    yield from _facts_held(
        monkeypatch,
        "xla_widens_column_indices",
        "xla_vectorises_linear_indices",
        "xla_splits_loops",
        "xla_vectorises_rows_in_units",
    )


@pytest.fixture
def written_indices_on_any_size(monkeypatch, lowerings_on_any_cpu):
    """nd_fill_from_written_indices chosen for every GatherND fill of index tuples that read
    slices, as where the and-ed loop and the generic gather's would split into tasks: for what
    it computes."""
    yield from _facts_held(monkeypatch, "and_loop_splits", "indexed_loop_splits")


@pytest.fixture
def clamp_on_any_cpu(monkeypatch, bits_pinned_on_any_jax):
    """rows_pinned_by_a_clamp chosen for every row shape, as where XLA:CPU vectorises the
    clamp-pinned select and not the exclusive or's (bfloat16 rows of 38-58 elements on x86-64,
    JAX 0.10 to 0.12.0, where bfloat16's bits are pinned: bits_pinned_on_any_jax): for what it
    computes. Not among lowerings_on_any_cpu: where it holds, a fill takes no short rows in bytes."""
    yield from _facts_held(monkeypatch, "xla_vectorises_rows_clamped")


@pytest.fixture
def fill_pin_on_any_jax(monkeypatch):
    """fill_pinned_instead_of_rows chosen as where XLA:CPU keeps the bits of a select of rows
    through a pinned fill (bfloat16 on JAX 0.11 and later, tests/test_cpu_facts.py): for its rule
    and what it computes."""
    yield from _facts_held(monkeypatch, "pins_the_fill")


@pytest.fixture
def element_pin_on_any_cpu(monkeypatch):
    """fill_pinned_for_elements chosen as where the generic select of bfloat16 elements is one of
    LLVM's bfloat vectors and the pinned fill's is not (x86-64 with AVX2 or AVX-512;
    tests/test_cpu_facts.py): for its rule and what it computes."""
    yield from _facts_held(monkeypatch, "xla_selects_bfloat_vectors_unless_pinned")


@pytest.fixture
def bits_pinned_on_any_jax(monkeypatch):
    """bfloat16's bits pinned where XLA:CPU moves single elements, as where it moves them through
    float32 (jax_gather._fill.xla_cpu_keeps_bits answering no: JAX 0.10 to 0.12.0,
    tests/test_cpu_facts.py): for the rules of the lowerings that pin them and what they compute."""
    # Where XLA:CPU keeps them, the facts asked of programs that pin were asked unpinned.
    kept = _fill.xla_cpu_keeps_bits(np.dtype(ml_dtypes.bfloat16))
    asked_of_pins = (
        _cpu_fills.xla_vectorises_pinned_rows,
        _cpu_fills.xla_selects_bfloat_vectors_unless_pinned,
    )
    for fact in asked_of_pins if kept else ():
        fact.cache_clear()
    monkeypatch.setattr(_fill, "_xla_cpu_keeps_bits", lambda dtype: False)
    yield from _chosen_afresh(monkeypatch)
    for fact in asked_of_pins if kept else ():
        fact.cache_clear()


@pytest.fixture
def rows_pinned_on_any_jax(monkeypatch, bits_pinned_on_any_jax):
    """A fill's rows pinned as where XLA:CPU moves bfloat16 through float32 and selects it in
    float32 (JAX 0.10), not its fill: for the rules of the lowerings that weigh a pin of the rows."""
    yield from _facts_held(monkeypatch, "pins_the_fill", answer=False)


@pytest.fixture
def rows_on_any_jax(monkeypatch):
    """short_rows_in_bytes chosen as where XLA:CPU vectorises its rows (through JAX 0.10; from
    0.11 it is left out, tests/test_cpu_facts.py): for its rule and what it computes."""
    yield from _facts_held(monkeypatch, "xla_vectorises_rows_in_units")


@pytest.fixture(scope="module")
def on_the_cpu():
    """The default device put on this process's CPU for a whole module: the modules that test
    XLA:CPU's facts and lowerings, or the host path, which serve a CPU alone (on a machine with
    an accelerator, jit would compile for it, where none of them applies)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield
