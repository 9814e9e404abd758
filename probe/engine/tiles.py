"""The fused CPU tile kernel of the single pass (``tiles.cpp``): built once per machine, used at long N.

At N ≥ :data:`MIN_KEYS` keys on a CPU, :func:`probe.engine.attention._stream_single_pass` hands each block of
query rows to :func:`tile_block` instead of a GEMM, a softmax over the whole block and a second GEMM: the
kernel keeps each head's [rows × keys] scores in cache-sized tiles (an online softmax, flash-attention style)
and writes the same α, output and log-sum-exp (equal to the torch path within float32 rounding;
tests/engine/test_tiles.py). Where the layer's sinks want only row reductions (``SinkNeeds.reduce``) it runs
from :data:`MIN_REDUCE_KEYS` and writes no α at all, summing the reductions from each tile row in cache.
Below those lengths both paths cost the same (docs/benchmarks.md), so short inputs never need it.

The kernel is C++ compiled by ``torch.utils.cpp_extension`` on first use (about 10 s with a C++ compiler,
once: the library is cached under ``~/.cache/probe/tiles``, or ``$PROBE_CACHE/tiles``). Where it cannot be
built — no compiler, a CPU without AVX2, a PyTorch build whose BLAS does not export ``sgemm_`` —
:func:`available` says so in one line on stderr, once, and the torch path runs: the same numbers, slower at
long N. ``PROBE_TILE_KERNEL=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path

import torch

from probe.cache import cache_root

# Keys from which the tile kernel runs for dense α blocks: in the whole forward it saves ~10 % of an 8K
# capture and ~20 % at 16K; at 4K it ties with the torch path (docs/benchmarks.md, "The fused tile kernel").
MIN_KEYS = 8192
# ... and when the sinks want only row reductions (no α block leaves the kernel): it saves ~5 % of a 4K
# capture and ties at 1K (docs/benchmarks.md, "Row reductions inside the kernel").
MIN_REDUCE_KEYS = 2048
# [query rows × keys] of one scores tile: 128 rows keep the GEMMs near full speed, 1024 keys keep the tile
# (512 KiB) in the core's L2 cache.
Q_TILE = 128
K_TILE = 1024
SOURCE = Path(__file__).with_name("tiles.cpp")
# the compiler flags of each CPU capability torch reports (ATen's vector types read CPU_CAPABILITY_*)
_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512",
               "-DCPU_CAPABILITY=AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2", "-DCPU_CAPABILITY=AVX2"],
}


def _say(line: str) -> None:
    print(f"probe: {line}", file=sys.stderr, flush=True)


def _cache_dir(tag: str) -> Path:
    return cache_root() / "tiles" / tag


def _library() -> Path:
    """Where this source's build for this torch and CPU capability is (or will be) cached."""
    capability = torch.backends.cpu.get_cpu_capability()
    tag = hashlib.sha256(SOURCE.read_bytes() + f"{torch.__version__}|{capability}".encode()).hexdigest()[:16]
    return _cache_dir(tag) / f"probe_tiles_{tag}.so"


def unavailable_reason() -> str | None:
    """Why the kernel cannot be built or loaded here (None: it can be), without building it. A cached build
    needs no compiler."""
    if os.environ.get("PROBE_TILE_KERNEL", "1") == "0":
        return "PROBE_TILE_KERNEL=0"
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in _FLAGS:
        return f"this CPU's vector capability is {capability}; the kernel needs AVX2 or AVX-512"
    if not torch.backends.mkl.is_available():
        return "this PyTorch build has no MKL BLAS (the kernel's GEMMs call its sgemm_)"
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None and not _library().exists():
        return f"no C++ compiler ({compiler}) on PATH: install one (Debian: apt-get install g++) or set CXX"
    return None


@functools.cache
def available() -> bool:
    """Whether :func:`tile_block` can run: builds (or loads the cached build of) the kernel on the first call.
    On failure, one line on stderr says why and that long captures take the torch path."""
    reason = unavailable_reason()
    if reason is None:
        reason = _build()
    if reason is not None and reason != "PROBE_TILE_KERNEL=0":
        _say(f"the fused CPU attention kernel is not available ({reason}); captures of {MIN_REDUCE_KEYS}+ "
             "tokens take the torch path (the same α, slower)")
    return reason is None


def _build() -> str | None:
    """Load the cached kernel library, or compile and load it; the reason it failed, or None."""
    library = _library()
    if library.exists():
        with contextlib.suppress(OSError, RuntimeError):  # a stale or broken build: compiled again below
            torch.ops.load_library(str(library))
            return None
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        return "no C++ compiler on PATH and no cached build"
    # imported here: the extension builder pulls in setuptools, which `probe --help` never needs
    from torch.utils.cpp_extension import load

    build = library.parent
    try:  # an unwritable cache is a reason (the one line available() says), not a crash nor a second line
        build.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"its cache {build} cannot be created ({error.strerror or error}): set PROBE_CACHE to a " \
               "writable folder"
    if not os.access(build, os.W_OK | os.X_OK):
        return f"its cache {build} is not writable: set PROBE_CACHE to a writable folder"
    _say(f"building the fused CPU attention kernel once (about 10 s; cached in {build})")
    try:
        # the build's own output only on failure: torch prints compiler lines when verbose
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            load(name=library.stem, sources=[str(SOURCE)], build_directory=str(build),
                 extra_cflags=["-O3", "-fopenmp", *_FLAGS[torch.backends.cpu.get_cpu_capability()]],
                 extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
    except (RuntimeError, OSError, ImportError) as error:  # a failed compile or link, a missing symbol
        return f"the build failed: {str(error).strip().splitlines()[-1] if str(error).strip() else error}"
    return None


def tile_block(
    queries: torch.Tensor,  # [batch·kv group query dim] float32
    keys_t: torch.Tensor,  # [batch·kv dim key] float32
    values: torch.Tensor,  # [batch·kv key dim_v] float32
    mask: torch.Tensor | None,  # [batch 1|head query key] additive float32, or None
    alpha: torch.Tensor | None,  # [batch·kv group rows key_stop] contiguous, written; None: not kept
    output: torch.Tensor,  # [batch·kv group rows dim_v], written
    lse: torch.Tensor,  # [batch·kv group rows], written
    scale: float,
    start: int,
    stop: int,
    key_stop: int,
    causal: bool,
    max_alpha: torch.Tensor | None = None,  # [batch·kv group rows], written; None: not wanted
    weights_t: torch.Tensor | None = None,  # [batch|1 feature key] contiguous: a reduction's w, transposed
    reduced: torch.Tensor | None = None,  # [batch·kv group rows feature], written with weights_t
) -> None:
    """One block of query rows [start, stop) of every head through the kernel: α (softmax over keys
    [0, key_stop), zero past a causal row's query) unless `alpha` is None, the block's output Σ_j α_ij v_j and
    log-sum-exp (0 for a fully masked row), each row's largest α when `max_alpha` is given, and Σ_j α_ij w_jf
    into `reduced` when `weights_t` is (summed from each tile row while it is in the L1 cache). Needs
    :func:`available`."""
    nothing = torch.empty(0)
    torch.ops.probe_tiles.tile_block(queries, keys_t, values, nothing if mask is None else mask,
                                     nothing if alpha is None else alpha, output, lse,
                                     nothing if max_alpha is None else max_alpha,
                                     nothing if weights_t is None else weights_t,
                                     nothing if reduced is None else reduced, scale, start, stop, key_stop,
                                     causal, Q_TILE, K_TILE)
