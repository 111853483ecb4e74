import os

import jax
import pytest
from hypothesis import settings

from jax_gather import _cpu

# JAX_GATHER_EXAMPLES=400 pytest draws ten times as many cases as the default run.
settings.register_profile(
    "jax_gather",
    deadline=None,
    print_blob=True,
    max_examples=int(os.environ.get("JAX_GATHER_EXAMPLES", 40)),
)
settings.load_profile("jax_gather")


@pytest.fixture
def columns_on_any_cpu(monkeypatch):
    """The column lowerings chosen as where their fact holds (XLA:CPU widening indices in the
    loop): for what they compute and what XLA makes of them, which do not depend on the CPU."""
    monkeypatch.setattr(_cpu, "xla_widens_column_indices", lambda: True)
    _cpu._choose.cache_clear()
    jax.clear_caches()
    yield
    monkeypatch.undo()
    _cpu._choose.cache_clear()
    jax.clear_caches()
