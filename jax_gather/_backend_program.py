"""A checked ONNX graph (jax_gather._onnx_graph.Graph) as one jitted program.

:class:`Program` plans the graph's gather nodes from the shapes of its inputs, tests the
indices that are inputs or constants on the host, and runs the graph as one jitted program;
jax_gather.backend's ``JaxGatherRep.run`` calls it, and runs the graph node by node where it
gives None.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from onnx import TensorProto

from jax_gather import _strings, ops
from jax_gather._arguments import Mode
from jax_gather._cpu_client import (
    CPU_COPIED_INLINE,
    aligned_for_cpu,
    joined,
    split_for_cpu,
    tested_and_narrowed,
)
from jax_gather._host_bounds import Verdict, in_range_test, judged_outside_range
from jax_gather._onnx_graph import Graph, origins
from jax_gather._traced_bounds import in_bounds
from jax_gather._x64 import call_with_x64_on, x64_enabled
from jax_gather.plans import gather_elements_plan, gather_nd_plan, gather_plan

_PLANS = {"Gather": gather_plan, "GatherElements": gather_elements_plan, "GatherND": gather_nd_plan}


class _Step(NamedTuple):
    """A gather node of a program, for one signature of its sources."""

    plan: Any
    source: str | None  # the input or constant its indices are (through Identity nodes), if any
    in_range: Callable[[np.ndarray], bool] | None  # the host test of those indices


# Where a gather node of a program reads its indices (the program's static ``taken``): the
# position of a source, ``_COMPUTED`` (the graph computes them: tested in the program), or
# ``_NORMALISED`` (the next of the arrays the host normalised).
_COMPUTED, _NORMALISED = -1, -2


class Program:
    """A checked graph as one jitted program: ``run(feeds)`` gives the outputs as JAX arrays,
    or None where the graph must run node by node to raise its error.

    For each shape of the inputs, the plans of its gather nodes come from the shapes alone
    (``plans``, nothing runs). Indices that are inputs or constants are tested on the host
    before the program runs (one pass each where every index is in [0, s-1]; those are then
    gathered as they are, the rest normalised); indices that nodes compute are tested in the
    program, which returns one flag for all of them. Any failure, of a test or of a plan,
    sends the run node by node (``evaluate`` of jax_gather._onnx_graph), which raises the
    op's error naming the node.

    A signature of NumPy inputs that ran is remembered (:meth:`run_known`): later runs of it
    test the index inputs and call the program, with nothing validated or planned again.
    """

    def __init__(self, graph: Graph, device: jax.Device) -> None:
        self._graph = graph
        self._device = device
        self._on_cpu = device.platform == "cpu"
        # What the program takes: the graph inputs, then the constants (a run may feed those
        # initializers that the graph also lists as inputs).
        self._sources = graph.inputs + tuple(graph.constants)
        self._constants: dict[str, jax.Array] | None = None
        self._steps: dict[tuple, tuple[_Step, ...] | None] = {}
        # One jitted program per choice of modes and index sources, called with its arrays as
        # positional arguments (no static arguments to hash, no tuples to flatten: about 3 µs
        # a run on a 3-node model).
        self._programs: dict[tuple, Callable[..., Any]] = {}
        # Fed signatures that ran: their steps, and their run where every index is in [0, s-1].
        self._known: dict[tuple, tuple[tuple[_Step, ...], Callable[[tuple], Any] | None]] = {}
        self._host_constants = tuple(graph.constants.values())
        self._origin = origins(graph)
        self._index_only = _index_only(graph, self._sources)
        self._inputs_fed = (True,) * len(graph.inputs) + (False,) * len(graph.constants)

    @staticmethod
    def can_run(graph: Graph) -> bool:
        """Whether the graph can be one program: no string tensors (JAX has no string dtype)."""
        strings = any(t == TensorProto.STRING for t in graph.input_types.values())
        return not strings and not any(_strings.is_string_dtype(c.dtype) for c in graph.constants.values())

    def run_known(self, inputs: Any) -> tuple[jax.Array, ...] | None:
        """The outputs for ``inputs`` as ``run`` gives them, where they are NumPy arrays of a
        signature (shapes and dtypes) that :meth:`run` has run; else None, for the full path.
        Nothing is validated again: the signature was, and only the values can differ."""
        names = self._graph.inputs
        if type(inputs) is dict:
            if len(inputs) != len(names):
                return None
            try:
                values = tuple([inputs[name] for name in names])
            except KeyError:
                return None
        elif type(inputs) is list or type(inputs) is tuple:
            values = tuple(inputs)
        elif type(inputs) is np.ndarray:
            values = (inputs,)
        else:
            return None
        for value in values:
            if type(value) is not np.ndarray:
                return None
        known = self._known.get(tuple([(value.shape, value.dtype) for value in values]))
        if known is None:
            return None
        steps, in_range = known
        outputs = in_range(values) if in_range is not None else None
        if outputs is None:  # an index input out of [0, s-1]: every case, step by step
            with x64_enabled(), jax.default_device(self._device):
                outputs = self._execute(values + self._host_constants, self._inputs_fed, steps)
        return outputs

    def _in_range_run(self, steps: tuple[_Step, ...], signature: tuple) -> Callable[[tuple], Any] | None:
        """For a signature's steps, the run of fed inputs where every index input is in
        [0, s-1] (None where it finds one that is not): what :meth:`_execute` does then, with
        every choice that depends only on the signature made once. None where a constant's
        indices are not all in [0, s-1] (they never change: every run takes ``_execute``)."""
        assert self._constants is not None
        names, fed, on_cpu = self._graph.inputs, self._inputs_fed, self._on_cpu
        # Whether an input of the signature is of a size JAX's CPU client copies on a worker
        # thread (only those may get an aligned or narrowed copy: aligned_for_cpu).
        client_copies = lambda i: math.prod(signature[i][0]) * signature[i][1].itemsize >= CPU_COPIED_INLINE
        checks, modes, taken = [], [], []
        for plan, source, test in steps:
            if source is None or test is None:
                modes.append(Mode.CHECKED)
                taken.append(_COMPUTED)
                continue
            position = self._sources.index(source)
            modes.append(Mode.IN_RANGE)
            if not fed[position]:
                if not test(self._graph.constants[source]):
                    return None
                taken.append(position)
                continue
            replaced = self._index_only[position]
            taken.append(position if replaced else _NORMALISED)
            # Narrowed or aligned copies only where they may be made (by size, as in _execute).
            checks.append((position, test, plan if on_cpu and client_copies(position) else None, replaced))
        modes_, taken_, sources = tuple(modes), tuple(taken), len(self._sources)
        program = self._program(modes_, taken_, sources, ())
        constants = tuple(self._constants[name] for name in self._sources[len(names) :])
        aligned = tuple(i for i in range(len(names)) if on_cpu and client_copies(i))
        replaced_inputs = {position for position, _, _, replaced in checks if replaced}
        # Large inputs that no tested copy replaces: read in place where they split
        # (split_for_cpu), else sent before the tests, so that the client's copy overlaps
        # them, as it does JAX's own conversion of int64 inputs in a jitted call.
        kept = tuple(i for i in aligned if i not in replaced_inputs)
        device = self._device
        send_to = device if checks else None

        def tested_run(values: tuple) -> Any:
            extra: list[np.ndarray] = []
            arguments = list(values)
            split, tails = _placed(arguments, kept, send_to)
            for position, test, plan, replaced in checks:
                indices = values[position]
                if plan is None:
                    if not test(indices):
                        return None
                    if not replaced:
                        extra.append(indices)
                    continue
                in_range, narrow = tested_and_narrowed(indices, plan, test)
                if not in_range:
                    return None
                given = indices if narrow is None else narrow
                if replaced:
                    arguments[position] = given
                    split, tails = _placed(arguments, (position,), None, split, tails)
                else:
                    extra.append(aligned_for_cpu(given, True))
            run = self._program(modes_, taken_, sources, split) if split else program
            outputs, ok = run(*arguments, *constants, *tails, *extra)
            if ok is not None and not bool(ok):
                return None
            return outputs

        return lambda values: call_with_x64_on(device, tested_run, values)

    def run(self, feeds: Mapping[str, np.ndarray], inputs: Any = None) -> tuple[jax.Array, ...] | None:
        """The outputs, or None where the graph must run node by node; ``inputs``, as the
        caller gave them, where their signature may be remembered for :meth:`run_known`."""
        if self._constants is None:  # on the device once, not on every run
            self._constants = {k: jax.device_put(v, self._device) for k, v in self._graph.constants.items()}
        host = tuple(feeds[n] if n in feeds else self._graph.constants[n] for n in self._sources)
        steps = self._plan(tuple((v.shape, v.dtype) for v in host))
        if steps is None:
            return None
        outputs = self._execute(host, tuple(n in feeds for n in self._sources), steps)
        if outputs is not None and inputs is not None and self._fed_as_given(inputs, feeds):
            if len(self._known) >= 64:
                self._known.clear()
            signature = tuple((feeds[n].shape, feeds[n].dtype) for n in self._graph.inputs)
            self._known[signature] = (steps, self._in_range_run(steps, signature))
        return outputs

    def _fed_as_given(self, inputs: Any, feeds: Mapping[str, np.ndarray]) -> bool:
        """Whether ``inputs`` were the graph inputs alone, NumPy arrays fed as they are (native
        byte order, the declared dtypes): what :meth:`run_known` can take."""
        names = self._graph.inputs
        if isinstance(inputs, Mapping):
            if len(inputs) != len(names):
                return False  # initializers fed too
            given = [inputs[name] for name in names]
        else:
            given = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return all(type(v) is np.ndarray and v is feeds[n] for n, v in zip(names, given))

    def _execute(
        self, host: tuple, fed: tuple[bool, ...], steps: tuple[_Step, ...]
    ) -> tuple[jax.Array, ...] | None:
        """The program on ``host`` (a NumPy array per source, ``fed`` where the run feeds it,
        else the model's constant), or None where an index is out of bounds.

        Each gather node whose indices are a source has them judged here, as eager calls
        judge theirs (jax_gather._host_bounds): in one pass where every index is in [0, s-1]
        (fed ones narrowed in the same pass where that pays), then gathered as they are; small
        ones with negatives normalised here, larger ones after a minimum and a maximum judge
        them, in the program. A fed input read only as indices
        is replaced by its tested copy (normalised, narrowed, or itself), any other's copy is
        an argument of its own, so that a run with negatives and one without share a program;
        indices the graph computes are tested in the program (one flag comes back).
        """
        assert self._constants is not None
        on_cpu = self._on_cpu
        values = [v if is_fed else self._constants[n] for n, v, is_fed in zip(self._sources, host, fed)]
        modes, taken, extra = [], [], []
        for plan, source, in_range in steps:
            if source is None or in_range is None:
                modes.append(Mode.CHECKED)  # tested in the program
                taken.append(_COMPUTED)
                continue
            position = self._sources.index(source)
            indices = host[position]
            is_fed = fed[position]
            if on_cpu and is_fed:  # tested, and narrowed where that pays, in one pass
                tested, narrow = tested_and_narrowed(indices, plan, in_range)
            else:
                tested, narrow = in_range(indices), None
            if tested:
                verdict, moved = Verdict.IN_RANGE, indices if narrow is None else narrow
            else:
                verdict, moved = judged_outside_range(plan, indices, normalise=True)
            if verdict is Verdict.OUT_OF_BOUNDS:
                return None
            mode, given = Mode.PROMISE_IN_BOUNDS, indices  # normalised in the program
            if moved is not None:  # in [0, s-1]: as given, narrowed, or normalised on the host
                mode, given = Mode.IN_RANGE, moved
            modes.append(mode)
            if given is indices and not is_fed:
                taken.append(position)  # a constant in [0, s-1]: on the device already
            elif is_fed and self._index_only[position]:
                taken.append(position)  # in place of the input, which nothing else reads
                values[position] = given
            else:
                taken.append(_NORMALISED)
                extra.append(aligned_for_cpu(given, on_cpu))
        fed_arrays = tuple(i for i, is_fed in enumerate(fed) if is_fed) if on_cpu else ()
        split, tails = _placed(values, fed_arrays, None)
        try:
            program = self._program(tuple(modes), tuple(taken), len(values), split)
            outputs, ok = program(*values, *tails, *extra)
        except (IndexError, TypeError, ValueError):
            return None  # raised while tracing (computed indices into an empty axis, say)
        if ok is not None and not bool(ok):  # the one value read back before the outputs
            return None
        return outputs

    def _program(
        self, modes: tuple[Mode, ...], taken: tuple[int, ...], sources: int, split: tuple
    ) -> Callable[..., Any]:
        """The jitted graph for these modes and index sources, taking as positional arguments
        the ``sources`` values (the head of each that is ``split``, a (position, shape) pair
        per source given as two parts: :func:`_placed`), the tails of those, and then the
        normalised indices."""
        key = (modes, taken, split)
        program = self._programs.get(key)
        if program is None:
            if len(self._programs) >= 64:  # a split's key holds its shape: bounded as signatures are
                self._programs.clear()
            parts = sources + len(split)

            def trace(*arrays: Any) -> Any:
                values = list(arrays[:sources])
                for (position, shape), tail in zip(split, arrays[sources:parts]):
                    values[position] = joined(values[position], tail, shape)
                return self._trace(tuple(values), arrays[parts:], modes=modes, taken=taken)

            program = self._programs[key] = jax.jit(trace)
        return program

    def _plan(self, signature: tuple) -> tuple[_Step, ...] | None:
        """Each gather node's step, for sources of these (shape, dtype); None where a plan
        fails (the node's error is due)."""
        known = self._steps.get(signature, self)  # self: not planned yet (None: plans fail)
        if known is not self:
            return known  # type: ignore[return-value]
        shapes = {name: shape for name, (shape, _) in zip(self._sources, signature)}
        dtypes = {name: dtype for name, (_, dtype) in zip(self._sources, signature)}
        steps: list[_Step] = []
        result: tuple[_Step, ...] | None
        for node in self._graph.nodes:
            if node.op_type == "Identity":
                shapes[node.output] = shapes[node.inputs[0]]
                continue
            data, indices = node.inputs
            try:
                plan = _PLANS[node.op_type](shapes[data], shapes[indices], node.attribute)
            except (ValueError, TypeError, IndexError):
                result = None
                break
            shapes[node.output] = plan.output_shape
            source = self._origin.get(indices)
            test = None if source is None else in_range_test(plan, dtypes[source], math.prod(shapes[source]))
            steps.append(_Step(plan, source, test))
        else:
            result = tuple(steps)
        if len(self._steps) >= 64:
            self._steps.clear()
        self._steps[signature] = result
        return result

    def _trace(
        self, values: tuple, normalised: tuple, *, modes: tuple[Mode, ...], taken: tuple[int, ...]
    ) -> tuple[tuple[jax.Array, ...], Any]:
        """The graph on ``values`` (one per source); each gather node's indices, its ``mode``
        and where they are taken from (``taken``) as :meth:`run` decided."""
        env = dict(zip(self._sources, values))
        flags = []
        steps = iter(zip(modes, taken))
        extra = iter(normalised)
        for node in self._graph.nodes:
            if node.op_type == "Identity":
                env[node.output] = env[node.inputs[0]]
                continue
            mode, where = next(steps)
            data = env[node.inputs[0]]
            if where == _COMPUTED:
                indices = env[node.inputs[1]]
            else:
                indices = next(extra) if where == _NORMALISED else values[where]
            plan = _PLANS[node.op_type](data.shape, indices.shape, node.attribute)
            if mode is Mode.CHECKED:
                flags.append(jnp.all(in_bounds(plan, indices)))
                mode = Mode.PROMISE_IN_BOUNDS
            env[node.output] = ops.op_program(data, indices, None, plan=plan, mode=mode)
        ok = jnp.all(jnp.stack(flags)) if flags else None
        return tuple(env[name] for name in self._graph.outputs), ok


def _index_only(graph: Graph, sources: tuple[str, ...]) -> tuple[bool, ...]:
    """For each source, whether the graph reads it only as the indices of one gather node
    (through Identity nodes): a run may then give the program its tested, normalised or
    narrowed copy in its place, rather than both (an argument the program does not read still
    costs its dispatch about 2.5 µs)."""
    origin = origins(graph)
    reads: dict[str, int] = dict.fromkeys(sources, 0)
    other = {origin[name] for name in graph.outputs if name in origin}
    for node in graph.nodes:
        if node.op_type != "Identity":
            data, indices = node.inputs
            if data in origin:
                other.add(origin[data])
            if indices in origin:
                reads[origin[indices]] += 1
    return tuple(reads[name] == 1 and name not in other for name in sources)


def _placed(
    arguments: list,
    positions: tuple[int, ...],
    device: jax.Device | None,
    split: tuple = (),
    tails: tuple = (),
) -> tuple[tuple, tuple]:
    """Each NumPy array of ``arguments`` at ``positions`` (a large fed input), in place, as
    JAX's CPU client reads it fastest: the head of its split (:func:`split_for_cpu`), whose
    tail the client aliases, or else its aligned copy (:func:`aligned_for_cpu`), sent to
    ``device`` now where one is given (the client's copy then overlaps the tests that follow).
    Returns ``split`` and ``tails`` with those split added: a (position, shape) pair and the
    tail for each."""
    for i in positions:
        array = arguments[i]
        if type(array) is not np.ndarray or array.nbytes < CPU_COPIED_INLINE:
            continue  # a small one the client copies on the calling thread
        parts = split_for_cpu(array)
        if parts is not None:
            arguments[i] = parts[0]
            split, tails = (*split, (i, array.shape)), (*tails, parts[1])
            continue
        arguments[i] = aligned_for_cpu(array, True)
        if device is not None:
            arguments[i] = jax.device_put(arguments[i], device)
    return split, tails
