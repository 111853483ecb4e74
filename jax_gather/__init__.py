"""ONNX Gather, GatherElements and GatherND for JAX, each one ``lax.gather``."""

from jax_gather import openvino
from jax_gather._checkify_wrapper import checked
from jax_gather._traced_bounds import in_bounds
from jax_gather.allocator import AllocatorTuning, tune_cpu_allocator
from jax_gather.onnx_export import register_jax2onnx
from jax_gather.ops import gather, gather_elements, gather_nd
from jax_gather.plans import GatherPlan, gather_elements_plan, gather_nd_plan, gather_plan

__all__ = [
    "AllocatorTuning",
    "GatherPlan",
    "checked",
    "gather",
    "gather_elements",
    "gather_elements_plan",
    "gather_nd",
    "gather_nd_plan",
    "gather_plan",
    "in_bounds",
    "openvino",
    "register_jax2onnx",
    "tune_cpu_allocator",
]
__version__ = "0.1.0"
