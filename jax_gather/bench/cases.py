"""The benchmark's shapes (:data:`CASES`) and the inputs each is timed on."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark shape; indices are drawn uniformly from each indexed axis."""

    name: str
    op: str  # "gather", "gather_elements" or "gather_nd"
    attribute: int
    data_shape: tuple[int, ...]
    indices_shape: tuple[int, ...]
    negative: bool = False  # draw from [-s, s-1] rather than [0, s-1]
    dtype: str = "float32"
    vmapped: bool = False  # the op is vmapped over the leading dim of data and indices
    quick: bool = False
    batch_dims: int = 0  # Gather's (OpenVINO Gather-7/8, tf.gather)

    def scaled(self, divisor: int) -> Case:
        """The same case with every dim divided by ``divisor`` (at least 1): for tests."""
        shrink = lambda shape: tuple(max(1, d // divisor) for d in shape)
        tail = self.indices_shape[-1:] if self.op == "gather_nd" else ()
        head = self.indices_shape[: len(self.indices_shape) - len(tail)]
        if self.op == "gather_nd":
            # Batch dims must stay equal to data's.
            b = self.attribute + self.vmapped
            data = shrink(self.data_shape)
            return dataclasses.replace(
                self, data_shape=data, indices_shape=data[:b] + shrink(head[b:]) + tail
            )
        if self.op == "gather_elements":
            data = shrink(self.data_shape)
            return dataclasses.replace(self, data_shape=data, indices_shape=data)
        data, b = shrink(self.data_shape), self.batch_dims
        return dataclasses.replace(self, data_shape=data, indices_shape=data[:b] + shrink(head[b:]))


def _cases() -> list[Case]:
    base = [
        Case("gather axis 0 (embedding)", "gather", 0, (50000, 512), (8192,), quick=True),
        Case("gather axis 1", "gather", 1, (512, 4096), (2048,), negative=True, quick=True),
        Case("gather batch_dims=1 rows", "gather", 1, (64, 1024, 64), (64, 2048), batch_dims=1, quick=True),
        Case("gather_elements axis -1", "gather_elements", -1, (2048, 2048), (2048, 2048), quick=True),
        Case("gather_elements axis 0", "gather_elements", 0, (2048, 2048), (2048, 2048), quick=True),
        Case("gather_nd rows", "gather_nd", 0, (256, 256, 64), (100000, 2), quick=True),
        Case("gather_nd scalars", "gather_nd", 0, (1024, 1024), (1000000, 2), quick=True),
        Case("gather_nd batch_dims=1 rows", "gather_nd", 1, (64, 1024, 64), (64, 2048, 1)),
        Case("gather_nd batch_dims=1 scalars", "gather_nd", 1, (64, 256, 256), (64, 16384, 2)),
        Case("vmap gather axis 0", "gather", 0, (16, 4096, 128), (16, 2048), vmapped=True),
        Case(
            "vmap gather_elements axis -1",
            "gather_elements",
            -1,
            (16, 512, 512),
            (16, 512, 512),
            vmapped=True,
        ),
    ]
    variants = [
        dataclasses.replace(c, dtype=dt, name=f"{c.name} {dt}", quick=False)
        for c in base[:7]
        if not c.batch_dims
        for dt in ("bfloat16", "int8")
    ]
    return base + variants


CASES = _cases()


def make_inputs(case: Case, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The case's data (its dtype) and int64 indices, drawn from ``rng``."""
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if case.dtype == "bfloat16" else np.dtype(case.dtype)
    if np.dtype(dtype).kind == "i":
        data = rng.integers(-100, 100, case.data_shape).astype(dtype)
    else:
        data = rng.standard_normal(case.data_shape, dtype=np.float32).astype(dtype)
    lead = 1 if case.vmapped else 0
    plan = _plan(case, case.data_shape[lead:], case.indices_shape[lead:])
    sizes = np.asarray(plan.index_sizes)
    if not plan.tuple_indices:
        sizes = sizes[0]
    low = -sizes if case.negative else 0
    indices = np.floor(low + rng.random(case.indices_shape) * (sizes - low)).astype(np.int64)
    return data, indices


def output_shape(case: Case, data: np.ndarray, indices: np.ndarray) -> tuple[int, ...]:
    """The shape of the case's output on these inputs (the vmapped dim included)."""
    lead = 1 if case.vmapped else 0
    return data.shape[:lead] + _plan(case, data.shape[lead:], indices.shape[lead:]).output_shape


def _plan(case: Case, data_shape: tuple[int, ...], indices_shape: tuple[int, ...]) -> Any:
    from jax_gather import plans

    if case.op == "gather":
        return plans.gather_plan(data_shape, indices_shape, case.attribute, case.batch_dims)
    plan_fn = {"gather_elements": plans.gather_elements_plan, "gather_nd": plans.gather_nd_plan}[case.op]
    return plan_fn(data_shape, indices_shape, case.attribute)
