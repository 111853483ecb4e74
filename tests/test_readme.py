"""The README's code blocks that are not doctests run as written, each in a fresh process.

The doctests (blocks of ``>>>``) run through pytest's ``--doctest-glob``; the blocks here are
plain scripts a reader would paste. They run with eight simulated CPU devices, as the README's
sharding examples say, so a block that needs a mesh of eight gets one.
"""

from __future__ import annotations

import pathlib
import re

import jax
import pytest

from tests.programs import run_with_cpu_devices

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if ">>>" not in b]

# APIs newer than the oldest JAX this library supports: a block using one is run where it exists.
NEWER_APIS = ("jax.shard_map", "jax.set_mesh", "jax.sharding.auto_axes")


def _missing(block: str) -> list[str]:
    def exists(path: str) -> bool:
        obj = jax
        for part in path.split(".")[1:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True

    return [api for api in NEWER_APIS if api in block and not exists(api)]


def test_the_readme_has_script_blocks():
    assert len(BLOCKS) >= 2  # shard_map and explicit sharding


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.strip().splitlines()[-1][:40] for b in BLOCKS])
def test_block_runs(block):
    missing = _missing(block)
    if missing:
        pytest.skip(f"JAX {jax.__version__} lacks {', '.join(missing)}")
    done = run_with_cpu_devices("-c", block, timeout=300)
    assert done.returncode == 0, f"README block failed:\n{block}\n{done.stderr[-3000:]}"
