"""The three ops as the tests see them, in one table: for each, its public function, its plan
function, its NumPy reference (tests/reference.py), its ONNX node type, the name of its one
attribute and the Hypothesis strategy that draws its cases (tests/strategies.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax_gather
from tests import reference, strategies


@dataclasses.dataclass(frozen=True)
class Op:
    name: str  # the Python name, the key of OPS: "gather", "gather_elements", "gather_nd"
    onnx: str  # the ONNX node type, the key of BY_ONNX: "Gather", "GatherElements", "GatherND"
    fn: Callable[..., Any]  # jax_gather.gather
    plan: Callable[..., Any]  # jax_gather.gather_plan
    reference: Callable[..., Any]  # tests.reference.gather
    attribute: str  # "axis" or "batch_dims", the third positional argument of fn and plan
    cases: Callable[..., Any]  # tests.strategies.gather_cases


OPS = {
    op.name: op
    for op in (
        Op("gather", "Gather", jax_gather.gather, jax_gather.gather_plan, reference.gather, "axis",
           strategies.gather_cases),
        Op("gather_elements", "GatherElements", jax_gather.gather_elements, jax_gather.gather_elements_plan,
           reference.gather_elements, "axis", strategies.gather_elements_cases),
        Op("gather_nd", "GatherND", jax_gather.gather_nd, jax_gather.gather_nd_plan, reference.gather_nd,
           "batch_dims", strategies.gather_nd_cases),
    )
}  # fmt: skip
BY_ONNX = {op.onnx: op for op in OPS.values()}
