import os

import jax
import pytest
from hypothesis import settings

from jax_gather import _cpu

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


def pytest_configure(config):
    if config.getoption("markexpr") == "core":
        settings.load_profile("jax_gather_core")


@pytest.fixture
def lowerings_on_any_cpu(monkeypatch):
    """The lowerings that rest on a fact of the CPU chosen as where it holds (XLA:CPU widening
    indices in the loop of a column gather; splitting loops into tasks, which it does on two
    cores or more): for what they compute and what XLA makes of them, which do not depend on
    the CPU."""
    monkeypatch.setattr(_cpu, "xla_widens_column_indices", lambda: True)
    monkeypatch.setattr(_cpu, "xla_splits_loops", lambda: True)
    _cpu._choose.cache_clear()
    jax.clear_caches()
    yield
    monkeypatch.undo()
    _cpu._choose.cache_clear()
    jax.clear_caches()
