"""Compile, cache and call the generated CPU kernels.

The C++ of :mod:`.cpu_codegen` (``-O3 -march=native -fopenmp``) is built by ninja into
``$EQUIBENCH_KERNEL_CACHE/<descriptor hash>/`` (default ``~/.cache/equibench/kernels``):
one library per direction (forward, backward, double backward: the tensor product's and
the convolution's kernels together) and dtype, each built on its first call from
translation units that compile in parallel, the forward's row code shared with the
double backward. A library exports plain ``extern "C"`` functions, so it includes no
PyTorch header (compiles in seconds) and is called through ``ctypes`` (the GIL is released
during the call). A second process finds the built library by name and starts no build.
A missing compiler, missing ninja or a failed build raises :class:`KernelUnavailable`
with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from equibench.files import atomic_write

from .cpu_codegen import generate_cpu_units
from .descriptor import TPDescriptor
from .errors import KernelUnavailable
from .graph import ConvPlan

CFLAGS = ["-O3", "-march=native", "-fopenmp", "-std=c++17"]
LDFLAGS = ["-fopenmp"]

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_P, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_SIGNATURES: dict[str, list] = {
    "tp_fwd": [_I64] + [_P] * 4 + [_INT],
    "tp_bwd": [_I64] + [_P] * 7 + [_INT],
    "tp_dbwd": [_I64] + [_P] * 11 + [_INT],
    "conv_fwd": [_I64, _I64] + [_P] * 8 + [_INT],
    "conv_bwd": [_I64, _I64] + [_P] * 11 + [_INT],
    "conv_dbwd": [_I64, _I64] + [_P] * 18 + [_INT],
}

_LOCK = threading.Lock()
_LOADED: dict[str, CpuKernels] = {}


def cache_root() -> Path:
    """Where compiled kernels live (``$EQUIBENCH_KERNEL_CACHE`` or the user cache)."""
    env = os.environ.get("EQUIBENCH_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "equibench" / "kernels"


# Asked once per process: every library's name hashes them, so a process that finds its
# kernels built would otherwise run the compiler and read /proc/cpuinfo for each one.
@functools.cache
def _compiler_id(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"C++ compiler {cxx!r} does not run: {exc}") from exc
    return out.stdout.splitlines()[0] if out.stdout else cxx


@functools.cache
def _host_id() -> str:
    """CPU model and feature flags: ``-march=native`` code must not travel to another CPU
    through a shared cache directory."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.machine() + platform.processor()


def _ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr() if t is not None else None)


def _threads() -> int:
    return max(1, torch.get_num_threads())


class CpuKernels:
    """The compiled kernels of one descriptor; every method takes and returns tensors
    in e3nn's layout (``x (B, in1_dim)``, ``y (B, in2_dim)``, ``w (B, weight_numel)``)."""

    def __init__(self, desc: TPDescriptor) -> None:
        self.desc = desc
        self._fn: dict[tuple[str, str], ctypes._CFuncPtr] = {}
        self.paths: dict[tuple[str, str], Path] = {}  # the libraries built or found so far
        self._lock = threading.Lock()

    def library(self, name: str, sfx: str) -> ctypes._CFuncPtr:
        """Kernel ``name`` in scalar type ``sfx``, its direction's library (:meth:`build`)
        built on first call."""
        if (name, sfx) not in self._fn:
            self.build((name.split("_", 1)[1],), sfx)
        return self._fn[name, sfx]

    def build(self, directions: tuple[str, ...], sfx: str) -> None:
        """Build (or find in the cache) the libraries of ``directions`` (``fwd``, ``bwd``,
        ``dbwd``) in ``sfx``, all in one parallel build: each direction's library holds the
        tensor product's and the convolution's kernels (:func:`direction_group`), which
        share their row code, so a case builds only the directions and dtype it runs, and
        the first forward waits for the forward alone (see docs/design-decisions.md)."""
        with self._lock:
            todo = [d for d in directions if (f"tp_{d}", sfx) not in self._fn]
            if not todo:
                return
            units = generate_cpu_units(self.desc, sfx)
            built = build_libraries(
                {f"{unit}_{sfx}": src for unit, src in units.sources.items()},
                {f"eqb_{d}_{sfx}": tuple(f"{u}_{sfx}" for u in units.libraries[d])
                 for d in todo},
                cache_root() / self.desc.hash, ("-fvisibility=hidden",))
            for d in todo:
                path = built[f"eqb_{d}_{sfx}"]
                lib = _load(path)
                check = getattr(lib, f"eqb_descriptor_hash_{sfx}")
                check.restype = ctypes.c_char_p
                if check() != self.desc.hash.encode():
                    raise KernelUnavailable(
                        f"library {path} does not match descriptor {self.desc.hash}")
                for member in direction_group(f"tp_{d}"):
                    fn = getattr(lib, f"{member}_{sfx}")
                    fn.argtypes = _SIGNATURES[member]
                    fn.restype = None
                    self._fn[member, sfx] = fn
                    self.paths[member, sfx] = path

    def _call(self, name: str, dtype: torch.dtype, *args: object) -> None:
        try:
            sfx = _SUFFIX[dtype]
        except KeyError:
            raise TypeError(f"CPU kernels support float32 and float64, not {dtype}") from None
        self.library(name, sfx)(*args)

    def _check(self, *pairs: tuple[torch.Tensor | None, int]) -> None:
        dtype = pairs[0][0].dtype  # type: ignore[union-attr]
        for t, dim in pairs:
            if t is None:
                continue
            if t.dtype != dtype or t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError("CPU kernels need contiguous CPU tensors of one dtype")
            if t.dim() != 2 or t.shape[1] != dim:
                raise ValueError(f"expected a (rows, {dim}) tensor, got {tuple(t.shape)}")

    # ---------------------------------------------------------------- plain TP
    def tp_forward(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``(B, out_dim)`` = e3nn ``TensorProduct(x, y, w)``."""
        d = self.desc
        self._check((x, d.in1_dim), (y, d.in2_dim), (w, d.weight_numel))
        out = x.new_empty(x.shape[0], d.out_dim)
        self._call("tp_fwd", x.dtype, x.shape[0], _ptr(x), _ptr(y), _ptr(w), _ptr(out), _threads())
        return out

    def tp_backward(
        self, g: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients ``(gx, gy, gw)`` of ``sum(g * TP(x, y, w))``."""
        d = self.desc
        self._check((g, d.out_dim), (x, d.in1_dim), (y, d.in2_dim), (w, d.weight_numel))
        gx, gy, gw = torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)
        self._call(
            "tp_bwd", x.dtype, x.shape[0],
            *map(_ptr, (g, x, y, w, gx, gy, gw)), _threads(),
        )  # fmt: skip
        return gx, gy, gw

    def tp_double_backward(
        self,
        g: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        w: torch.Tensor,
        ggx: torch.Tensor | None,
        ggy: torch.Tensor | None,
        ggw: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients ``(dg, dx, dy, dw)`` of ``<ggx, gx> + <ggy, gy> + <ggw, gw>`` where
        ``(gx, gy, gw) = tp_backward(g, x, y, w)``; a ``None`` cotangent counts as zero."""
        d = self.desc
        self._check(
            (g, d.out_dim), (x, d.in1_dim), (y, d.in2_dim), (w, d.weight_numel),
            (ggx, d.in1_dim), (ggy, d.in2_dim), (ggw, d.weight_numel),
        )  # fmt: skip
        dg, dx, dy, dw = (torch.empty_like(t) for t in (g, x, y, w))
        self._call(
            "tp_dbwd", x.dtype, x.shape[0],
            *map(_ptr, (g, x, y, w, ggx, ggy, ggw, dg, dx, dy, dw)), _threads(),
        )  # fmt: skip
        return dg, dx, dy, dw

    # ---------------------------------------------------------------- convolution
    def conv_forward(
        self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, plan: ConvPlan
    ) -> torch.Tensor:
        """``(num_nodes, out_dim)``: ``sum_{e: dst(e)=n} TP(x[src(e)], y[e], w[e])``."""
        d = self.desc
        self._check((x, d.in1_dim), (y, d.in2_dim), (w, d.weight_numel))
        out = x.new_empty(plan.num_nodes, d.out_dim)
        workspace = x.new_empty(conv_workspace("conv_fwd", d, plan.num_nodes, plan.num_src))
        self._call(
            "conv_fwd", x.dtype, plan.num_nodes, plan.num_src,
            *map(_ptr, (plan.dst_ptr, plan.dst_perm, plan.edge_src, x, y, w, out, workspace)),
            _threads(),
        )  # fmt: skip
        return out

    def conv_backward(
        self, g: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, plan: ConvPlan
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Gradients ``(gx, gy, gw)`` of ``sum(g * conv_forward(x, y, w))``."""
        d = self.desc
        self._check((g, d.out_dim), (x, d.in1_dim), (y, d.in2_dim), (w, d.weight_numel))
        gx, gy, gw = torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)
        workspace = x.new_empty(conv_workspace("conv_bwd", d, plan.num_nodes, plan.num_src))
        self._call(
            "conv_bwd", x.dtype, plan.num_nodes, plan.num_src,
            *map(_ptr, (plan.src_ptr, plan.src_perm, plan.edge_dst, g, x, y, w, gx, gy, gw,
                        workspace)),
            _threads(),
        )  # fmt: skip
        return gx, gy, gw

    def conv_double_backward(
        self,
        g: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        w: torch.Tensor,
        ggx: torch.Tensor | None,
        ggy: torch.Tensor | None,
        ggw: torch.Tensor | None,
        plan: ConvPlan,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :meth:`tp_double_backward` for the convolution."""
        d = self.desc
        self._check(
            (g, d.out_dim), (x, d.in1_dim), (y, d.in2_dim), (w, d.weight_numel),
            (ggx, d.in1_dim), (ggy, d.in2_dim), (ggw, d.weight_numel),
        )  # fmt: skip
        dg, dx, dy, dw = (torch.empty_like(t) for t in (g, x, y, w))
        graph = (plan.dst_ptr, plan.dst_perm, plan.edge_src, plan.src_ptr, plan.src_perm,
                 plan.edge_dst)  # fmt: skip
        workspace = x.new_empty(conv_workspace("conv_dbwd", d, plan.num_nodes, plan.num_src))
        self._call(
            "conv_dbwd", x.dtype, plan.num_nodes, plan.num_src,
            *map(_ptr, (*graph, g, x, y, w, ggx, ggy, ggw, dg, dx, dy, dw, workspace)),
            _threads(),
        )  # fmt: skip
        return dg, dx, dy, dw


def direction_group(kernel: str) -> tuple[str, str]:
    """The kernels built together with ``kernel``: the tensor product's and the
    convolution's of its direction (``tp_bwd`` -> ``("tp_bwd", "conv_bwd")``)."""
    direction = kernel.split("_", 1)[1]
    return f"tp_{direction}", f"conv_{direction}"


def conv_workspace(kernel: str, desc: TPDescriptor, num_nodes: int, num_src: int) -> int:
    """Elements of the workspace a convolution kernel writes its channel-major copies of
    node tensors to: x for ``conv_fwd``, g for ``conv_bwd``, x, ggx and g for
    ``conv_dbwd`` (see ``to_cm_all`` in :mod:`.cpu_codegen`)."""
    return {"conv_fwd": num_src * desc.in1_dim,
            "conv_bwd": num_nodes * desc.out_dim,
            "conv_dbwd": 2 * num_src * desc.in1_dim + num_nodes * desc.out_dim}[kernel]


@contextlib.contextmanager
def _builder(build_dir: Path) -> Iterator[int]:
    """Hold ``build_dir`` for one build, across processes: ninja's log and dependency
    files take one writer. An ``flock`` dies with its process, so a build killed midway
    (a timeout, a cancelled job) holds nothing once its children end. Yields the lock's
    file descriptor, for the builder's children to hold it as long."""
    with open(build_dir / "equibench-build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield handle.fileno()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ninja() -> str:
    try:
        import ninja

        return str(Path(ninja.BIN_DIR) / "ninja")
    except ImportError:
        found = shutil.which("ninja")
        if found is None:
            raise KernelUnavailable("no ninja to build the CPU kernels: pip install ninja") \
                from None
        return found


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def build_libraries(sources: dict[str, str], libraries: dict[str, tuple[str, ...]],
                    build_dir: Path, extra_cflags: tuple[str, ...] = ()) -> dict[str, Path]:
    """Compile ``sources`` (unit name -> C++) into objects and link ``libraries`` (name ->
    its units) in ``build_dir``, in one ninja run: units compile in parallel on every CPU
    of this process, and an object two libraries share compiles once. Every file is named
    by a hash of what made it (its source or its objects, the flags, the compiler and this
    CPU), so a second call finds them, a process never loads a library that changed, and
    ``-march=native`` code never travels to another CPU through a shared cache. Each file
    is written under a temporary name and renamed, so a killed build leaves none half
    written. ``extra_cflags`` follow :data:`CFLAGS`. Returns each library's path."""
    cflags = CFLAGS + list(extra_cflags)
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise KernelUnavailable(f"no C++ compiler: {cxx!r} is not on PATH (set $CXX)")
    key = _digest(" ".join(cflags), " ".join(LDFLAGS), _compiler_id(cxx), _host_id())
    objects = {unit: f"{unit}_{_digest(key, source)}" for unit, source in sources.items()}
    paths = {name: build_dir / f"{name}_{_digest(key, *(objects[u] for u in units))}.so"
             for name, units in libraries.items()}
    if all(p.exists() for p in paths.values()):
        return paths
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        with _builder(build_dir) as lock:
            for unit, stem in objects.items():
                src = build_dir / f"{stem}.cpp"
                if not src.exists():
                    with atomic_write(src, "w") as handle:  # never half a file for ninja
                        handle.write(sources[unit])
            rules = [
                f"cxx = {cxx}",
                f"cflags = {' '.join(cflags)} -fPIC",
                f"ldflags = {' '.join(LDFLAGS)}",
                "rule cxx",
                "  command = $cxx $cflags -c $in -o $out.tmp && mv -f $out.tmp $out",
                "rule link",
                "  command = $cxx -shared $in -o $out.tmp $ldflags && mv -f $out.tmp $out",
                *[f"build {stem}.o: cxx {stem}.cpp" for stem in objects.values()],
                *[f"build {paths[name].name}: link "
                  + " ".join(f"{objects[u]}.o" for u in units)
                  for name, units in libraries.items()],
            ]
            ninja_file = build_dir / f"build-{_digest(*rules)}.ninja"
            if not ninja_file.exists():
                with atomic_write(ninja_file, "w") as handle:
                    handle.write("\n".join(rules) + "\n")
            jobs = len(os.sched_getaffinity(0))
            proc = subprocess.run(
                [_ninja(), "-C", str(build_dir), "-f", ninja_file.name, "-j", str(jobs),
                 *(p.name for p in paths.values())],
                # ninja holds the lock too: a killed caller must not let a second ninja in
                capture_output=True, text=True, pass_fds=(lock,))  # fmt: skip
        if proc.returncode != 0:
            raise KernelUnavailable(f"building CPU kernels in {build_dir} failed:\n"
                                    f"{(proc.stdout + proc.stderr)[-4000:]}")
        return paths
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"building CPU kernels in {build_dir} failed: {exc}") from exc


def build_library(sources: dict[str, str], build_dir: Path, prefix: str,
                  extra_cflags: tuple[str, ...] = ()) -> tuple[ctypes.CDLL, Path]:
    """One library ``prefix`` of all ``sources`` (:func:`build_libraries`), loaded."""
    path = build_libraries(sources, {prefix: tuple(sources)}, build_dir, extra_cflags)[prefix]
    return _load(path), path


def _load(path: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise KernelUnavailable(f"loading {path} failed: {exc}") from exc


def cpu_kernels(desc: TPDescriptor) -> CpuKernels:
    """The CPU kernels of ``desc``, each compiled on its first call and cached (memory and
    disk)."""
    with _LOCK:
        kernels = _LOADED.get(desc.hash)
        if kernels is None:
            kernels = _LOADED[desc.hash] = CpuKernels(desc)
        return kernels
