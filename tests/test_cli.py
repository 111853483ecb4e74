import io
import subprocess
import sys

import jax

from jax_gather import cli
from jax_gather.spec_examples import SPEC_EXAMPLES


def test_tour_runs_every_spec_example_and_prints_the_plans():
    out = io.StringIO()
    assert cli.tour(out) == 0
    text = out.getvalue()
    assert f"{len(SPEC_EXAMPLES)} of {len(SPEC_EXAMPLES)} spec examples match." in text
    assert text.count("matches the spec") == len(SPEC_EXAMPLES)
    assert "operand_batching_dims=(0,)" in text and f"backend {jax.default_backend()}" in text


def test_module_entry_point_help():
    proc = subprocess.run(
        [sys.executable, "-m", "jax_gather", "--help"], capture_output=True, text=True, check=True
    )
    assert "usage: jax-gather" in proc.stdout
