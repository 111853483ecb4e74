"""Sharded gathers: correct for every placement, and local where the op does not gather across
the sharded dims (no collective in the compiled program, forward or backward).

JAX fixes its device count when it starts, so the cases run once, in a child process with 8
simulated CPU devices (``tests/sharding_cases.py``), which reports what it measured as JSON;
each test here judges one record of that report, and shows the child's traceback if it raised.
These tests guard the lowering: a gather that flattens batch dims, for instance, makes XLA
all-gather the operand, and the "local" placements below then fail.
"""

from __future__ import annotations

import json
import re

import jax
import pytest

from jax_gather._cpu_client import JAX_RELEASE
from tests import sharding_cases as cases
from tests.programs import run_with_cpu_devices

# One child process with eight simulated devices runs every case: end to end, so in the slow tier.
pytestmark = pytest.mark.slow

HAS_EXPLICIT_AXES = hasattr(getattr(jax.sharding, "AxisType", None), "Explicit")


@pytest.fixture(scope="module")
def report() -> dict:
    child = run_with_cpu_devices("-m", "tests.sharding_cases", devices=cases.DEVICES)
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        pytest.fail(
            f"the sharding child process failed (exit {child.returncode}):\n"
            f"{child.stdout[-3000:]}\n{child.stderr[-6000:]}"
        )
    result = json.loads(lines[-1])
    result["records"] = {r["case"]: r for r in result["records"]}
    return result


def _record(report: dict, case: str) -> dict:
    record = report["records"].get(case)
    assert record is not None, f"the child process reported no case {case!r}"
    assert record["error_text"] is None, f"{case} raised in the child process:\n{record['error_text']}"
    return record


def test_child_ran_on_the_simulated_mesh(report):
    assert report["devices"] == cases.DEVICES
    assert report["jax"] == jax.__version__
    assert report["explicit_axes"] == HAS_EXPLICIT_AXES
    expected = [case for ids in cases.case_ids().values() for case in ids]
    if not HAS_EXPLICIT_AXES:
        expected = [c for c in expected if not c.startswith("explicit")]
    assert sorted(report["records"]) == sorted(expected)


def _placed(p: cases.Placement) -> str:
    return f"data P{p.data_spec}, indices P{p.indices_spec} on a {p.mesh} mesh"


@pytest.mark.parametrize("mode", cases.MODES)
@pytest.mark.parametrize("p", cases.PLACEMENTS, ids=lambda p: p.name)
def test_placement_is_correct_and_local_where_it_can_be(report, p, mode):
    r = _record(report, f"{p.name}:{mode}")
    assert r["equal"], f"{p.name} ({mode}): the sharded result differs from the reference"
    assert r["grad_equal"], f"{p.name} ({mode}): the sharded gradient differs from the reference"
    for direction, local in (("forward", p.local_forward), ("backward", p.local_backward)):
        found = r[direction]
        if local:
            assert not found, f"{p.name} ({mode}): the {direction} pass holds {found} with {_placed(p)}"
        elif local is False:
            # Inherent: the pass needs data held by other devices. Finding it also proves that
            # the detector still reads the compiled HLO, so "none found" above means something.
            assert found, f"{p.name} ({mode}): no collective in the {direction} pass ({p.why})"
    if p.local_forward:
        assert r["output_sharded"], f"{p.name} ({mode}): the output is replicated, not sharded"


@pytest.mark.parametrize("mode", cases.MODES)
@pytest.mark.parametrize("c", cases.SHARD_MAP_CASES, ids=lambda c: c.name)
def test_shard_map_gathers_local_blocks(report, c, mode):
    r = _record(report, f"shard_map/{c.name}:{mode}")
    assert r["equal"] and r["grad_equal"]
    assert r["forward"] == [] and r["backward"] == []


def test_checked_reports_the_global_position_for_sharded_inputs(report):
    r = _record(report, "sharded:checked()")
    assert r["equal"]
    assert r["error"] == (
        "GatherND: indices[5, 2, 0] = 10 is out of bounds for axis 1 of size 10 "
        "(valid range [-10, 9]); it is component 0 of the index tuple indices[5, 2, :]"
    )


def test_checked_reports_a_block_local_position_inside_shard_map(report):
    r = _record(report, "shard_map:checked()")
    assert r["equal"]
    # Each device checks its own block: row 5 of the whole is row 1 of device 2's two rows.
    assert re.search(
        r"mapped index 2: GatherElements: indices\[1, 2\] = 9 is out of bounds for axis 1 "
        r"of size 6 \(valid range \[-6, 5\]\)",
        r["error"] or "",
    ), r["error"]
    # JAX's own index checks, asked for here, do not trace inside shard_map before JAX 0.11
    # (seen on 0.10.2; on 0.11.2 they do): checked() says so, and goes on.
    warned = r["warnings"]
    assert bool(warned) == (JAX_RELEASE < (0, 11)), warned
    assert all("cannot trace its own index checks" in w for w in warned), warned


def test_no_cpu_lowering_pads_or_flattens_data_on_a_mesh(report):
    r = _record(report, "cpu_lowerings")
    # On one device these would read the fill from a pad of data and scatter the gradient by
    # one linear index into data flattened; with data sharded, either would move it.
    assert r["names"] == {"gather_nd batch_dims=1": [], "gather_elements": [], "short lookup": []}
    # GatherND's first indexed dim is sharded: each device gathers what it holds and an
    # all-reduce sums the output, as for any indexed dim; nothing moves data's blocks.
    assert r["gather_nd batch_dims=1"] == ["all-reduce"], r
    moved = ("all-gather", "collective-permute")
    assert not set(moved) & set(r["gather_nd batch_dims=1 backward"]), r
    assert r["short lookup"] == [], r  # a table sharded by columns: local


@pytest.mark.parametrize("where", ("jit", "shard_map"))
@pytest.mark.parametrize("name", list(cases.PINNED_CASES))
def test_a_pinned_select_keeps_its_bits_and_its_pins_local(report, name, where):
    r = _record(report, f"pinned/{name}:{where}")
    assert r["equal"], f"{name} ({where}): a bit differs from NumPy's (signalling NaNs, subnormals, fill)"
    assert r["forward"] == [], f"{name} ({where}): the pinned select from sharded ids holds {r['forward']}"
    # Every pinned select reads one pin for all indices on one device: lowered so from ids
    # sharded by jit, the first id is sent to every device, and the lowering keeps each
    # device's own. Inside shard_map the first is each block's own either way.
    assert r["one pin for all"] == (["all-reduce"] if where == "jit" else []), r


# JAX 0.7 types selects more strictly under explicit axes and refuses the checked mode's (its
# mask is typed by the indices, not the output); 0.8.0 and later accept them. The README says
# explicit axes are supported from JAX 0.8.
EXPLICIT_AXES_SUPPORTED = HAS_EXPLICIT_AXES and JAX_RELEASE >= (0, 8, 0)
needs_explicit_axes = pytest.mark.skipif(
    not EXPLICIT_AXES_SUPPORTED, reason=f"jax {jax.__version__}: explicit axes are supported from JAX 0.8"
)


@needs_explicit_axes
@pytest.mark.parametrize("mode", cases.MODES)
@pytest.mark.parametrize("c", cases.EXPLICIT_CASES, ids=lambda c: c.name)
def test_explicit_axes_trace_and_type_the_output(report, c, mode):
    r = _record(report, f"explicit/{c.name}:{mode}")
    assert r["equal"] and r["grad_equal"]
    # The output's sharding is part of its type: the batch/data dims keep their mesh axes.
    expected = {
        "gather": "('x', None, 'y')",
        "gather_elements": "('x', None, 'y')",
        "gather_nd": "('x', None, None, 'y')",
    }[c.name]
    assert r["output_spec"] == expected
    assert r["forward"] == []


@needs_explicit_axes
def test_checked_traces_with_explicit_axes(report):
    r = _record(report, "explicit:checked()")
    assert r["equal"]
    assert r["error"] == (
        "GatherND: indices[6, 3, 0] = -11 is out of bounds for axis 1 of size 10 "
        "(valid range [-10, 9]); it is component 0 of the index tuple indices[6, 3, :]"
    )


@needs_explicit_axes
def test_vmap_over_an_explicitly_sharded_batch_dim(report):
    r = _record(report, "explicit:vmap")
    assert r["equal"]
    # The batched check reports the first failing example (a masked reduction picks it), and
    # names it: example 3, position 2.
    assert r["error"] == (
        "Gather: indices[3, 2] = 7 is out of bounds for axis 0 of size 5 (valid range [-5, 4])"
    )


@needs_explicit_axes
def test_auto_axes_resolves_what_the_explicit_gather_rule_cannot(report):
    r = _record(report, "explicit:auto_axes")
    assert r["equal"]
    assert r["output_spec"] == "('x', None, 'y')"
    assert r["forward"] == []
