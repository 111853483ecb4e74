import os

from hypothesis import settings

# JAX_GATHER_EXAMPLES=400 pytest draws ten times as many cases as the default run.
settings.register_profile(
    "jax_gather",
    deadline=None,
    print_blob=True,
    max_examples=int(os.environ.get("JAX_GATHER_EXAMPLES", 40)),
)
settings.load_profile("jax_gather")
