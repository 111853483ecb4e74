"""JAX's CPU client: which programs it runs on the calling thread, which NumPy arrays it
copies, and the copies of ours that spare it work (eager calls and a prepared model's run)."""

from __future__ import annotations

import functools
import math
import os
import re
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from jax_gather._host_bounds import INT32_MAX
from jax_gather.plans import GatherPlan

# Fact: JAX's CPU client runs a program on the calling thread when XLA's cost analysis counts
# fewer than this many flops in it, and hands any other to a worker thread and waits (10-100 us
# here; tests/test_cpu_facts.py checks it).
INLINE_FLOPS = 1000


@functools.cache
def xla_splits_loops() -> bool:
    """Whether XLA:CPU, in this process, splits a costly loop into a task per core (its parallel
    task assignment): where the process may run on two cores or more. Fact: XLA sizes the split
    by the cores the process may be scheduled on (its CPU affinity), so on a one-core machine, or
    in a process pinned to one core (``taskset -c 0``, a container's cpuset) it compiles every
    loop as one task, and a lowering whose reason is that split does not pay there
    (``jax_gather._cpu``; tests/test_cpu_facts.py checks the fact both ways)."""
    return usable_cores() > 1


# JAX 0.12.1 deprecates constructing jax.sharding.SingleDeviceSharding for
# make_single_device_sharding, which earlier releases lack.
if hasattr(jax.sharding, "make_single_device_sharding"):
    _MAKE_SINGLE_DEVICE_SHARDING = jax.sharding.make_single_device_sharding
else:
    _MAKE_SINGLE_DEVICE_SHARDING = jax.sharding.SingleDeviceSharding


def single_device_sharding(device: Any, memory_kind: str | None = None) -> Any:
    """A sharding onto one ``device`` (in ``memory_kind``, where given), as this JAX makes one."""
    return _MAKE_SINGLE_DEVICE_SHARDING(device, memory_kind=memory_kind)


def lowered_for_cpu(fn: Callable[..., Any], *arguments: tuple[tuple[int, ...], Any]) -> Any:
    """``jax.jit(fn)`` lowered for this process's CPU, for arguments of these (shape, dtype), or
    None where the process has no CPU backend: what the facts asked once a process compile."""
    try:
        cpu = single_device_sharding(jax.devices("cpu")[0])
    except RuntimeError:
        return None
    return jax.jit(fn).lower(*(jax.ShapeDtypeStruct(s, t, sharding=cpu) for s, t in arguments))


_MIN_COMPILE_TIME = "jax_persistent_cache_min_compile_time_secs"
# Two probes compiling at once on two threads would each restore what the other set.
_THRESHOLD_RAISED = threading.Lock()


def compile_afresh(lowered: Any, **compiler_options: str) -> Any:
    """``lowered.compile(compiler_options)``, never kept in JAX's persistent compilation cache.

    The facts of a CPU are asked of XLA compiling: where the user enabled the persistent cache
    (``jax_compilation_cache_dir``) with a threshold under a probe's compile time, a later
    process would load the probe's program from it, XLA would dump no kernel, and every fact
    asked of the IR would answer no (four did on the AMD EPYC, measured). No probe's program is
    written to the cache (the threshold is raised while it compiles), so none is read from it;
    the threshold is not part of any program's key, so nothing the user compiled is compiled again.
    """
    with _THRESHOLD_RAISED:
        threshold = getattr(jax.config, _MIN_COMPILE_TIME)
        jax.config.update(_MIN_COMPILE_TIME, 1e30)
        try:
            return lowered.compile(compiler_options=compiler_options or None)
        finally:
            jax.config.update(_MIN_COMPILE_TIME, threshold)


# XLA dumps the LLVM IR of each kernel where asked to: from JAX 0.11 only for the emitters that
# ``xla_dump_emitter_re`` names, an option JAX before 0.5 may not know. "llvm" names the LLVM IR
# alone: ".*" also prints each emitter's MLIR, which XLA:CPU 0.11 and 0.12 do on threads that race
# (std::terminate, "pure virtual method called": a process aborted in 2 of 3 runs of 60 such
# compiles on a loaded CPU, in none of 12 with "llvm").
IR_DUMP_OPTIONS: tuple[dict[str, str], ...] = ({"xla_dump_emitter_re": "llvm"}, {})


class Kernel(NamedTuple):
    """One kernel XLA:CPU compiled: its LLVM IR after LLVM's optimisations, and where asked, the
    conditional jumps of the machine code it became (None where that is not known)."""

    ir: str
    conditional_jumps: int | None = None


def kernels(lowered: Any, jumps: bool = False) -> list[Kernel]:
    """Each kernel XLA:CPU compiles for ``lowered`` (empty for None, or where this JAX cannot
    dump them), in the order of their names; ``jumps``: with the conditional jumps of each, as
    objdump (GNU binutils) disassembles its object file, where objdump is on PATH."""
    import glob
    import tempfile

    for extra in IR_DUMP_OPTIONS if lowered is not None else ():
        with tempfile.TemporaryDirectory() as tmp:
            try:
                compile_afresh(lowered, xla_dump_to=tmp, **extra)
            except Exception:
                continue
            # module_0004.jit_f.NAME.ir-with-opt.ll beside module_0004.jit_f.obj-file.NAME.o
            objects = {o.replace(".obj-file.", ".", 1)[: -len(".o")]: o for o in glob.glob(f"{tmp}/*.o")}
            found = []
            for path in sorted(glob.glob(f"{tmp}/*ir-with-opt.ll")):
                with open(path) as f:
                    obj = objects.get(path[: -len("ir-with-opt.ll")].rstrip("."))
                    found.append(Kernel(f.read(), _conditional_jumps(obj) if jumps else None))
            return found
    return []


def kernel_irs(lowered: Any) -> list[str]:
    """The LLVM IR, after LLVM's optimisations, of each kernel XLA:CPU compiles for ``lowered``
    (empty for None, or where this JAX cannot dump it)."""
    return [kernel.ir for kernel in kernels(lowered)]


# An x86-64 conditional jump as objdump prints it (je, jne, jb, ...; not jmp).
_CONDITIONAL_JUMP = re.compile(r"\tj(?!mp)[a-z]+ ")


def _conditional_jumps(path: str | None) -> int | None:
    """The conditional jumps in an object file's machine code, or None where objdump cannot say."""
    import shutil
    import subprocess

    objdump = shutil.which("objdump")
    if path is None or objdump is None:
        return None
    run = subprocess.run([objdump, "-d", path], capture_output=True, text=True)
    return len(_CONDITIONAL_JUMP.findall(run.stdout)) if run.returncode == 0 else None


def usable_cores() -> int:
    """The cores this process may be scheduled on: its CPU affinity where the OS has one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def kernel_ir_holds(
    pattern: re.Pattern, fn: Callable[..., Any], *arguments: tuple[tuple[int, ...], Any]
) -> bool:
    """Whether the LLVM IR of a kernel XLA:CPU compiles for ``fn`` on arguments of these (shape,
    dtype) holds ``pattern``: how a fact of this CPU and JAX is asked, once a process (false
    without a CPU backend)."""
    return any(pattern.search(ir) for ir in kernel_irs(lowered_for_cpu(fn, *arguments)))


JAX_RELEASE = tuple(int(part) for part in re.findall(r"\d+", jax.__version__)[:3])

# Fact: JAX's CPU client aliases a C-contiguous NumPy array whose data is aligned to this many
# bytes (NumPy aligns to 16) and copies any other: under CPU_COPIED_INLINE bytes on the calling
# thread (1-2 us), from there on a worker thread through JAX 0.10, a handoff that dominates up to
# about a MiB: an eager lookup of 64 rows from a 250 KiB table took 42 us with the client's copy
# and 20 us with an aligned copy NumPy makes (1 MiB: 267 and 160 us). Past ALIGNED_COPY_MAX it no
# longer paid (4 MiB read whole: 1.21 ms with the client's copy, 1.53 ms aliased). From JAX 0.11
# the client copies every size on the calling thread, and the aligned copy only adds one (that
# lookup: 17.8 us with it, 12.6 without, AMD EPYC): not made there.
CPU_ALIGNMENT = 64
CPU_COPIED_INLINE = 100 * 1024
ALIGNED_COPY_MAX = 1 << 20
CLIENT_COPIES_ON_A_WORKER_THREAD = JAX_RELEASE < (0, 11)


def alignment_may_pay(nbytes: int) -> bool:
    """Whether :func:`aligned_for_cpu` may copy an array of ``nbytes``: a signature's eager
    call that it never would skips the call (about 0.3 µs)."""
    return CLIENT_COPIES_ON_A_WORKER_THREAD and CPU_COPIED_INLINE <= nbytes <= ALIGNED_COPY_MAX


def aligned_for_cpu(array: np.ndarray, to_cpu: bool | None = None) -> np.ndarray:
    """``array``, or a copy whose data is aligned to ``CPU_ALIGNMENT`` bytes, where JAX's CPU
    client would copy it on a worker thread and the copy is small enough to pay: it goes to a
    CPU (``to_cpu``; by default, where the default device is one), and JAX keeps its dtype."""
    if not alignment_may_pay(array.nbytes):
        return array
    if array.flags.c_contiguous and array.ctypes.data % CPU_ALIGNMENT == 0:
        return array
    if not (default_device_is_cpu() if to_cpu is None else to_cpu):
        return array
    if jax.dtypes.canonicalize_dtype(array.dtype) != array.dtype:
        return array
    copy = aligned_empty(array.shape, array.dtype)
    np.copyto(copy, array)
    return copy


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An empty C-contiguous array whose data is aligned to ``CPU_ALIGNMENT``, which JAX's CPU
    client takes as it is (NumPy's own lies 16 bytes, or a multiple of 16, past a boundary)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.empty(nbytes + CPU_ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % CPU_ALIGNMENT
    return buffer[start : start + nbytes].view(dtype).reshape(shape)


# NumPy aligns its allocations to this many bytes; an array split for the CPU client has one of
# CPU_ALIGNMENT // NUMPY_ALIGNMENT - 1 offsets past a boundary, each a program of its own.
NUMPY_ALIGNMENT = 16


def split_for_cpu(array: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """For an array JAX's CPU client would copy on a worker thread (C-contiguous, of
    ``CPU_COPIED_INLINE`` bytes or more, not aligned to ``CPU_ALIGNMENT``), its flat elements
    as two views, ``(head, tail)``: the tail starts at the first aligned address, so the client
    aliases it, and the head is the few elements before (copied on the calling thread); None
    for any other array. A program that joins them (:func:`joined`) reads the array in place.

    Fact: XLA fuses the join into the reads of the program's gather, so nothing copies the
    array (tests/test_cpu_facts.py checks it). Measured on the AMD EPYC, jitted lookups from
    NumPy tables 16 bytes past a boundary, split against whole: 64 rows of a 4096x256 float32
    table 12 against 100 µs, 1024 rows of 65536x16 60 against 101, 8192 rows of 8192x32 93
    against 103 (int8, 1024 rows of 65536x16: 58 against 59); a prepared model of 4096x256
    float32 data and 2**20 column indices 0.61-0.65 against 0.74-0.83 ms. Only offsets of
    whole multiples of ``NUMPY_ALIGNMENT`` are split, which bounds the programs a signature
    compiles at three more."""
    if array.nbytes < CPU_COPIED_INLINE or not array.flags.c_contiguous:
        return None
    offset = -array.ctypes.data % CPU_ALIGNMENT
    if offset == 0 or offset % NUMPY_ALIGNMENT or offset % array.itemsize:
        return None
    if jax.dtypes.canonicalize_dtype(array.dtype) != array.dtype:
        return None
    flat = array.reshape(-1)
    return flat[: offset // array.itemsize], flat[offset // array.itemsize :]


def joined(head: Any, tail: Any, shape: tuple[int, ...]) -> Any:
    """The array :func:`split_for_cpu` split, in a traced program; a float narrower than 32
    bits joined as its bits (:func:`_bits_of`)."""
    bits = _bits_of(head.dtype)
    if bits is None:
        return jax.numpy.concatenate([head, tail]).reshape(shape)
    parts = [jax.lax.bitcast_convert_type(part, bits) for part in (head, tail)]
    return jax.lax.bitcast_convert_type(jax.numpy.concatenate(parts), head.dtype).reshape(shape)


@functools.lru_cache(maxsize=64)
def _bits_of(dtype: np.dtype) -> Any:
    """The unsigned type a float of ``dtype`` is joined as, or None: floats of 4, 8 and 16 bits.
    Fact (JAX 0.10.2, x86-64): XLA:CPU joins bfloat16 through float32 and float8 through float16,
    which quiets NaN payloads (bfloat16, float8_e5m2: a NumPy table read in place gave 0x7fc0
    for 0x7fb4) and converts each element the gather reads (float8 tables 2-3x the time of the
    gather of their bits). A join of bits moves them as they are."""
    from jax_gather._fill import bits_type  # _fill imports this module

    return bits_type(dtype) if jax.numpy.issubdtype(dtype, jax.numpy.floating) else None


# Fact: joined into a gather, the head and tail are read through a select an element (the join
# XLA fuses into the gather's loop), where the copy it spares costs a byte of data at a time. So
# it pays where data holds many bytes per element gathered. Measured (AMD EPYC, JAX 0.10.2 and
# 0.12.0.1; eager checked calls in place against the aligned copy of aligned_for_cpu through JAX
# 0.10, the client's copy from 0.11; 11-15 paired rounds), by output elements per byte of data:
# up to 1/32, 0.10-0.91 (1000 x 64 float32 by 64 ids 0.79, 0.84 on 0.12; 65536 x 64 by 1024 0.10;
# 30000 x 16 by 3500 0.73; 200000 x 16 int8 by 1000 0.30, by 6000 0.91; GatherElements 0.58-1.01);
# at 1/16 0.43-1.18 (30000 x 16 float32 by 7000: 1.11-1.18); at 1/4 0.71-2.86 (400000 x 16 int8
# by 100000: 1.67, 2.86 on 0.12); from 1/2 0.80-1.74.
READ_IN_PLACE_BYTES_PER_ELEMENT = 32  # data's bytes per output element, at least
# From JAX 0.11, where the client copies on the calling thread, a copy of data in the cache costs
# less than the join (JAX 0.12.0.1, in place / the client's copy: tables of 100-800 KiB
# 0.84-1.63, 1000 x 64 float32 by 64 ids 0.84-1.17; of 1.9 MiB and more 0.06-0.89).
READ_IN_PLACE_MIN_BYTES = CPU_COPIED_INLINE if CLIENT_COPIES_ON_A_WORKER_THREAD else 2 << 20


Call = Callable[[Any, Any], Any]  # call(data, indices), an eager call or a jitted program


def data_read_in_place(program: Call, shape: tuple[int, ...]) -> Call:
    """``program(data, indices)`` for NumPy data of ``shape`` that JAX's CPU client would copy:
    where it splits (:func:`split_for_cpu`) and goes to a CPU, the head and tail go to the same
    program joined (one more program per offset past a boundary, at most three), so nothing
    copies data; else its aligned copy where that pays (:func:`aligned_for_cpu`)."""
    return _read_in_place(program, _joined_program(program, shape))


def _joined_program(program: Call, shape: tuple[int, ...]) -> Any:
    return jax.jit(lambda head, tail, indices: program(joined(head, tail, shape), indices))


def _read_in_place(program: Call, joined_program: Any) -> Call:
    aligned = data_aligned(program)

    def call(data: Any, indices: Any) -> Any:
        parts = split_for_cpu(data) if type(data) is np.ndarray else None
        if parts is not None and default_device_is_cpu():
            return joined_program(*parts, indices)
        return aligned(data, indices)

    return call


# Fact (through JAX 0.10, whose client copies unaligned NumPy data on its worker thread): a
# program that runs on that thread itself (it counts INLINE_FLOPS or more) reads the client's
# copy from that core's cache, where data read in place, or aligned on the calling thread, is
# read from the other core's or from memory, a line at a time. Measured (AMD EPYC, JAX 0.10.2,
# programs on the worker, NumPy data 16 bytes past a boundary, in place / as it is, 15 paired
# rounds): 256 KiB of data 1.56-5.09 (GatherElements of 1024 and 8192 int8 indices; Gather of
# 512 float32 rows of 16 with a fill 4.53), 1 MiB 0.94-1.20, 4 MiB 0.46-0.54 (the client's copy
# of all of it costs more there). Eager GatherElements of 8192 int8 indices, 10% negative, from
# 4096 x 64: checked 0.75-1.03 of take_along_axis's "fill" with data as it is, 1.53-3.74 read
# in place or aligned. So such a program gets data as it is below this many bytes.
WORKER_READS_COPY_BELOW = 2 << 20


def data_placed(program: Call, data: np.ndarray, in_place: bool) -> Call:
    """``program(data, indices)`` for NumPy data like ``data``: read in place where
    ``in_place`` (:func:`data_read_in_place`), else aligned where that pays
    (:func:`data_aligned`), except where the program runs on JAX's worker thread and the
    client copies data there (WORKER_READS_COPY_BELOW): there data goes as it is. Where the
    program runs is read off its compiled program on the first call (which compiles it anyway)."""
    shape = data.shape
    if not (in_place or alignment_may_pay(data.nbytes)):
        return program
    if not (CLIENT_COPIES_ON_A_WORKER_THREAD and data.nbytes < WORKER_READS_COPY_BELOW):
        return _placed_on_the_calling_thread(program, shape, in_place)
    chosen: list[Call] = []

    def first_call(data: Any, indices: Any) -> Any:
        if not chosen:
            chosen.append(_placed_for_its_thread(program, shape, in_place, data, indices))
        return chosen[0](data, indices)

    return first_call


def _placed_for_its_thread(
    program: Call, shape: tuple[int, ...], in_place: bool, data: Any, indices: Any
) -> Call:
    parts = split_for_cpu(data) if in_place and type(data) is np.ndarray else None
    if parts is not None and default_device_is_cpu():
        joined_program = _joined_program(program, shape)  # the program in place would compile
        if runs_on_a_worker_thread(joined_program, *parts, indices):
            return program
        return _read_in_place(program, joined_program)
    if runs_on_a_worker_thread(program, data, indices):
        return program
    return _placed_on_the_calling_thread(program, shape, in_place)


def _placed_on_the_calling_thread(program: Call, shape: tuple[int, ...], in_place: bool) -> Call:
    return data_read_in_place(program, shape) if in_place else data_aligned(program)


def runs_on_a_worker_thread(program: Any, *arguments: Any) -> bool:
    """Whether JAX's CPU client runs this jitted program, on these arguments, on a worker thread
    (XLA counts INLINE_FLOPS or more): compiled for them here, as their first call would (the
    call then finds it compiled). Never with synchronous dispatch, which runs every program on
    the calling thread."""
    if getattr(jax.config, "jax_cpu_enable_async_dispatch", True) is False:
        return False
    cost = program.lower(*arguments).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):  # one per program on older JAX
        cost = cost[0] if cost else None
    return float((cost or {}).get("flops", 0.0)) >= INLINE_FLOPS


def data_aligned(program: Call) -> Call:
    """``program(data, indices)`` with NumPy data aligned where that pays (:func:`aligned_for_cpu`)."""

    def call(data: Any, indices: Any) -> Any:
        if type(data) is np.ndarray:
            data = aligned_for_cpu(data)
        return program(data, indices)

    return call


# Indices tested and narrowed together go in chunks of about this many (512 KiB of int64), each
# copied and then tested while it is in the core's cache.
NARROWED_CHUNK = 65536


def tested_and_narrowed(
    indices: np.ndarray, plan: GatherPlan, in_range: Callable[[np.ndarray], bool]
) -> tuple[bool, np.ndarray | None]:
    """Whether host ``indices`` are all in [0, s-1] (``in_range``: their in_range_test), and if
    so an int32 copy of them aligned for JAX's CPU client, where that pays
    (:func:`_narrowing_pays`; else None). Fact: with 2**20 unaligned int64 indices into 256
    columns, the client's copy made a program 0.7 ms slower, where this conversion took 0.2-0.5
    ms and halved what the gather reads. The copy is made a chunk at a time, each copied and
    then tested, so the indices are read from memory once, by the copy, which streams them
    faster than a reduction does; the test then reads the chunk from the cache. Measured on the
    AMD EPYC with 2**20 int64 indices out of every cache: 0.37 ms, where testing each chunk
    before its copy took 0.50, two whole passes 0.48, and NumPy's copy alone 0.23 (in cache:
    0.21, 0.24, 0.18 and 0.10)."""
    if not (_narrowing_pays(indices, plan) and indices.flags.c_contiguous):
        return in_range(indices), None
    narrow = narrowed_in_chunks(indices, plan, in_range)
    return narrow is not None, narrow


def narrowed_in_chunks(
    indices: np.ndarray, plan: GatherPlan, in_range: Callable[[np.ndarray], bool]
) -> np.ndarray | None:
    """An int32 copy of C-contiguous 64-bit host ``indices``, aligned to ``CPU_ALIGNMENT``, made
    a chunk at a time, each tested (``in_range``) while in the core's cache; None where one is
    outside [0, s-1] (:func:`tested_and_narrowed`)."""
    narrow = aligned_empty(indices.shape, np.int32)
    # Whole index tuples per chunk, for the test of a GatherND's components.
    width = indices.shape[-1] if plan.tuple_indices else 1
    source, target = indices.reshape(-1, width), narrow.reshape(-1, width)
    step = max(1, NARROWED_CHUNK // width)
    for start in range(0, len(source), step):
        chunk = source[start : start + step]
        np.copyto(target[start : start + step], chunk, casting="unsafe")
        if not in_range(chunk):
            return None
    return narrow


def _narrowing_pays(indices: np.ndarray, plan: GatherPlan) -> bool:
    """64-bit indices that JAX's client would copy on a worker thread (not aligned to
    ``CPU_ALIGNMENT``, of ``CPU_COPIED_INLINE`` bytes or more), into axes int32 addresses."""
    if indices.dtype.itemsize != 8 or indices.nbytes < CPU_COPIED_INLINE:
        return False
    if indices.flags.c_contiguous and indices.ctypes.data % CPU_ALIGNMENT == 0:
        return False  # read in place
    return max(plan.index_sizes) <= INT32_MAX


def converted_for_cpu(array: np.ndarray, dtype: Any) -> np.ndarray:
    """``array.astype(dtype)``, from ``CPU_COPIED_INLINE`` bytes of result converted straight
    into a buffer aligned to ``CPU_ALIGNMENT``, which JAX's CPU client takes as it is (one pass,
    where ``astype`` and then :func:`aligned_for_cpu` copied twice, and from 1 MiB left the
    client a copy of its own)."""
    dtype = np.dtype(dtype)
    if array.size * dtype.itemsize < CPU_COPIED_INLINE:
        return array.astype(dtype)
    converted = aligned_empty(array.shape, dtype)
    np.copyto(converted, array, casting="unsafe")
    return converted


def int32_for_cpu(indices: np.ndarray) -> np.ndarray:
    """Host ``indices`` that fit int32, as int32 (:func:`converted_for_cpu`)."""
    return converted_for_cpu(indices, np.int32)


class _PublicDefaultDevice:
    @property
    def value(self) -> Any:
        return jax.config.jax_default_device  # type: ignore[attr-defined]


# ``DEFAULT_DEVICE.value``: ``jax_default_device`` in this thread's context (a device, a
# platform's name or None), read on every eager call gathered on the host (a call remembered
# under a CPU default stays there only while the default is a CPU). JAX's own state object
# where it has one (JAX 0.4.35 to 0.12: 0.02 µs, where ``jax.config``'s attribute takes 0.07).
DEFAULT_DEVICE: Any = getattr(getattr(getattr(jax, "_src", None), "config", None), "default_device", None)
if not hasattr(DEFAULT_DEVICE, "value"):  # pragma: no cover - depends on the JAX release
    DEFAULT_DEVICE = _PublicDefaultDevice()


def default_device_is_cpu() -> bool:
    """Whether arrays without a device go to a CPU (where JAX's CPU client would copy NumPy's)."""
    device = DEFAULT_DEVICE.value
    if device is None:
        return jax.default_backend() == "cpu"
    return getattr(device, "platform", device) == "cpu"  # a device, or a platform's name


# JAX's transfer guard for copies from the host, set per thread by its contexts: a state object
# where JAX has one (0.4.35 to 0.12 do), else None (no transfer is made that it might stop).
_HOST_TO_DEVICE_GUARD: Any = getattr(
    getattr(getattr(jax, "_src", None), "config", None), "transfer_guard_host_to_device", None
)
_UNSEEN = (None, "allow", "log_explicit", "disallow_explicit")


def implicit_transfers_allowed() -> bool:
    """Whether JAX's transfer guard lets a program's NumPy argument go to a device unseen
    (neither stopped nor logged)."""
    if _HOST_TO_DEVICE_GUARD is None:
        return False
    return getattr(_HOST_TO_DEVICE_GUARD, "value", "disallow") in _UNSEEN


def on_host(indices: Any) -> bool:
    """Whether a concrete indices array can be read on the host without a transfer: NumPy, or
    a JAX array whose every shard is in this process's CPU memory."""
    if isinstance(indices, np.ndarray):
        return True
    sharding = indices.sharding
    return sharding.is_fully_addressable and all(d.platform == "cpu" for d in sharding.device_set)
