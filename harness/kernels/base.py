"""The path contract (``GemmPath``): everything a GEMM path knows about itself, and the registry.

Extension point: a new path is one module under ``harness/kernels/`` defining a subclass
of ``GemmPath``, plus one registration: its class in ``registry_load.BUILTIN`` (a plugin
file calls ``PATHS.register(MyPath())`` itself)::

    class MyPath(GemmPath):
        name = "my_path"
        role = "path"                 # "path" (TinyLoop ships it) or "peer" (comparison column)
        description = "what it is"
        weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 zero G*N*2"

        def weight_bytes(self, K, N, groups): return K * N // 2 + 4 * groups * N
        def unavailable_reason(self, device): return self.arch_reason(device)
        def prepare(self, weight, device): ...  # all load-time work, returns Prepared
        def run(self, prepared, A, out): ...     # writes C into ``out`` and returns it

Every consumer asks the path, never a table keyed by its name: the runner (availability,
cases, error bound, nondeterminism, the dispatcher's Marlin flag), the roofline
(``bytes_moved``, ``flops``; a path without a byte model is an error, never a default),
the studies (``variants``). What a path declares, each documented where ``GemmPath``
declares it:

  identity       name, role, description, implementation(device)
  where it runs  device_types, min_capability, arch_reason(device), unavailable_reason(device)
  which cases    kinds, unsupported_reason(case)
  cost           weight_formula, weight_bytes(K, N, groups), bytes_moved(case), flops(case)
  accuracy       error_bound(case), nondeterminism
  dispatch       is_marlin
  choices        variants
  the work       prepare(weight, device), run(prepared, A, out)

Contract of the work:
  * ``prepare`` does every load-time step (packing, dequant caches, workspaces, scratch)
    and is never timed as part of ``run``; ``Prepared.extra_bytes`` reports the device
    memory it holds beyond the quantized weight's own packed size. A weight the path
    cannot take raises ``UnsupportedCase`` (the runner reports ``unavailable``).
  * ``run(prepared, A, out)`` must write every element of ``out`` ([M, N], dtype
    ``prepared.output_dtype``) and return it. ``A`` is [M, K] of ``prepared.input_dtype``
    on the path's device (the runner converts outside any timing). ``run`` never times
    itself and never synchronises the device.
  * A kernel that reports failure (e.g. Marlin's non-zero return code) raises
    ``KernelReturnCode`` so the runner records ERROR/fallback with the reason.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.cases.data import QuantizedWeight

#: The fp16 accuracy gate: mean|C - ref| / mean|ref| against fp64 on the dequantized
#: weights (``[tool.harness] rel_err_gate``); the bound of every path that declares no other.
FP16_GATE = 1e-3
_DEVICE_WORDS = {"cpu": "a CPU", "cuda": "CUDA GPUs"}
#: The case kind of a SwiGLU gate/up pair: two weights, two GEMMs (``GemmCase.flops``).
PAIR_KIND = "swiglu_pair"


class KernelReturnCode(RuntimeError):
    """A kernel returned a non-zero status instead of computing C."""

    def __init__(self, path: str, rc: int, detail: str = "") -> None:
        self.path, self.rc, self.detail = path, rc, detail
        super().__init__(f"{path}: kernel returned rc={rc}" + (f" ({detail})" if detail else ""))


class UnsupportedCase(ValueError):
    """A path cannot take this particular weight/shape (raised by ``prepare``); one line."""


@dataclass(frozen=True)
class ByteModel:
    """Bytes a call must move, by part, and the formula used for the weight side."""

    weight: int
    activations: int
    output: int
    formula: str

    @property
    def total(self) -> int:
        return self.weight + self.activations + self.output


@dataclass(eq=False)
class Prepared:
    """What ``prepare`` produced: device tensors and metadata the path's ``run`` needs."""

    path: str
    weight: QuantizedWeight           # the source weight (on the device)
    device: torch.device
    state: dict[str, Any] = field(default_factory=dict)
    input_dtype: torch.dtype = torch.float16
    output_dtype: torch.dtype = torch.float16
    extra_bytes: int = 0              # device memory held beyond weight.nbytes_packed()
    prepare_seconds: float = 0.0      # filled in by ``GemmPath.prepare_timed``
    notes: str = ""

    @property
    def K(self) -> int:
        return self.weight.K

    @property
    def N(self) -> int:
        return self.weight.N


class GemmPath(ABC):
    """One way to compute C = A @ dequant(W). See the module docstring for the contract."""

    name: str = ""
    """The path's name: its rows' ``path`` column and its key in ``PATHS`` (unique)."""

    role: str = "path"
    """``"path"``: a way TinyLoop runs (its rows gate); ``"peer"``: a comparison column
    (reported, never failing the gate)."""

    description: str = ""
    """One line: what the path is (``implementation`` says what runs on a given device)."""

    kinds: tuple[str, ...] = ("gemm",)
    """The case kinds the path runs (``harness.cases.case.KINDS``); the runner reports a
    case of another kind ``unavailable``."""

    device_types: tuple[str, ...] = ("cpu", "cuda")
    """Device types the path runs on. On a CPU a path may run a stand-in or an emulation of
    its kernel; ``implementation(device)`` says which."""

    min_capability: tuple[int, int] | None = None
    """The lowest CUDA compute capability (major, minor) its GPU kernel runs on; None: any
    CUDA GPU. ``arch_reason`` checks it."""

    is_marlin: bool = False
    """True when the path runs a Marlin kernel. The runner records it on every row for the
    path the dispatcher chose (``ResultRow.dispatch_marlin``), from which the gate, which
    cannot import kernels, tells a lost Marlin dispatch (LOST_DISPATCH)."""

    nondeterminism: str = ""
    """"" when the path promises bitwise-identical outputs for identical inputs (the runner
    checks it over ``accuracy_runs`` runs and the gate fails a row that breaks it); else one
    line saying why its kernel may vary between runs (the gate then reports the variation
    without failing, unless ``fail_on_nondeterminism``)."""

    variants: tuple[str, ...] = ()
    """Names of the implementation variants a caller can pick (the constructor's ``variant``
    argument, e.g. ``marlin_asym``'s correction variants); empty: one implementation."""

    weight_formula: str = ""
    """The byte model of one weight, as text for rows and reports (e.g. ``"int4 K*N/2 +
    fp16 scale G*N*2 + fp16 zero G*N*2"``); goes with ``weight_bytes``."""

    # ------------------------------------------------------------------ the work
    @abstractmethod
    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when the path can run on ``device``; otherwise a one-line reason (the
        device type, the GPU's arch: ``arch_reason``; a missing build or dependency)."""

    @abstractmethod
    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        """All load-time work for ``weight`` on ``device``."""

    @abstractmethod
    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """C = A @ W written into ``out`` (every element) and returned."""

    # ------------------------------------------------------------------ what it knows
    def unsupported_reason(self, case) -> str | None:
        """None when the path has a kernel for ``case``'s shape; else a one-line reason.

        For shape limits known before the call (e.g. Marlin has no kernel for N % 256 != 0
        at M > 16): a path forced onto such a case is reported ``unavailable`` with this
        reason instead of an ERROR. A kernel that returns a failure code on a shape this
        method accepted is still an ERROR.
        """
        return None

    def unsupported_weight_reason(self, weight: QuantizedWeight) -> str | None:
        """None when some batch size M has a kernel for ``weight``; else a one-line reason.

        For a model forced through this path (``harness ppl``): a layer no call could run
        (e.g. Marlin with K = 576) makes the mode ``unavailable`` with this reason before
        anything is prepared, where a GEMM case is judged by ``unsupported_reason``. The
        dispatcher model does not ask it: TinyLoop's loader packs such a weight and its
        dispatcher falls back per call, which its report shows.
        """
        return None

    def implementation(self, device: torch.device) -> str:
        """What actually runs on ``device`` (shown in result rows)."""
        return self.description

    def arch_reason(self, device: torch.device) -> str | None:
        """Why ``device`` is outside ``device_types`` / ``min_capability``, or None."""
        if device.type not in self.device_types:
            where = " or ".join(_DEVICE_WORDS.get(t, repr(t)) for t in self.device_types)
            return f"{self.name} runs on {where} only, not {device.type!r}"
        if device.type != "cuda":
            return None
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch"
        if self.min_capability is not None:
            cap = tuple(torch.cuda.get_device_capability(device))
            if cap < tuple(self.min_capability):
                need = ".".join(map(str, self.min_capability))
                return f"{self.name} needs SM {need} or newer; this GPU is SM {cap[0]}.{cap[1]}"
        return None

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        """Device bytes of one [K, N] weight in ``groups`` groups as the kernel reads it (the
        roofline's weight side: every byte read once). A path without a byte model cannot
        be given a roofline: the default raises."""
        raise NotImplementedError(f"path {self.name!r} declares no byte model "
                                  "(GemmPath.weight_bytes / weight_formula)")

    def bytes_moved(self, case) -> ByteModel:
        """The fewest bytes one call on ``case`` must move through device memory: the
        weight(s) (``weight_bytes``; a SwiGLU pair holds two), A [M, K] and C [M, N] in
        2-byte elements (fp16, or bf16 for a bf16 path), each once."""
        n_weights = 2 if case.kind == PAIR_KIND else 1
        weight = n_weights * self.weight_bytes(case.K, case.N, case.groups)
        return ByteModel(weight, case.M * case.K * 2, case.M * case.N * 2, self.weight_formula)

    def flops(self, case) -> int:
        """Floating-point operations one call on ``case`` performs (2 M N K per GEMM)."""
        return int(case.flops)

    def error_bound(self, case) -> tuple[float, str]:
        """(bound, reason) on rel_err this path is held to on ``case``; the reason is ""
        when it is the fp16 gate. A path with a measured numerical limitation returns its
        looser bound and why (every row records both: ``rel_err_bound``, ``..._reason``)."""
        return FP16_GATE, ""

    def prepare_timed(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        """``prepare`` with its wall time recorded (load time, synchronised; not a kernel
        timing)."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        prepared = self.prepare(weight, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        prepared.prepare_seconds = time.perf_counter() - t0
        return prepared


def int4_weight_bytes(K: int, N: int, groups: int, per_group_column_bytes: int) -> int:
    """Bytes of int4 codes K*N/2 plus ``per_group_column_bytes`` per (group, column)
    (e.g. 4 for an fp16 scale and an fp16 zero)."""
    return K * N // 2 + groups * N * per_group_column_bytes


class PathRegistry:
    """Name -> path instance. Order of registration is the order of report columns.

    Each path remembers where it came from (``origin``: ``built-in``, the entry point of an
    installed plugin package, or a ``--plugin`` file), set by whoever loads it
    (``registering_from``); ``harness paths`` lists them."""

    def __init__(self) -> None:
        self._paths: dict[str, GemmPath] = {}
        self._origins: dict[str, str] = {}
        self._from = "built-in"

    @contextlib.contextmanager
    def registering_from(self, origin: str) -> Iterator[None]:
        """Paths registered (or replaced) inside the block come from ``origin``."""
        before, self._from = self._from, origin
        try:
            yield
        finally:
            self._from = before

    def register(self, path: GemmPath) -> GemmPath:
        if not isinstance(path, GemmPath):
            raise TypeError(f"register() takes a GemmPath instance, got {type(path).__name__}")
        if not path.name:
            raise ValueError(f"{type(path).__name__} has no name")
        if path.name in self._paths:
            raise ValueError(f"path {path.name!r} is registered twice (first by "
                             f"{self._origins.get(path.name, '?')})")
        if path.role not in ("path", "peer"):
            raise ValueError(
                f"path {path.name!r}: role must be 'path' or 'peer', got {path.role!r}")
        self._paths[path.name] = path
        self._origins[path.name] = self._from
        return path

    def replace(self, name: str, path: GemmPath) -> GemmPath:
        """Put ``path`` in the place of the registered path ``name`` (same column); returns
        the one replaced. For plugins that wrap a path (``harness bench --plugin``)."""
        old = self.get(name)
        if path.name != name:
            raise ValueError(f"replace: the new path is named {path.name!r}, not {name!r}")
        self._paths[name] = path
        self._origins[name] = f"{self._from}, wrapping {self._origins.get(name, '?')}"
        return old

    def origin(self, name: str) -> str:
        """Where the path ``name`` came from (``built-in``, ``entry point ...``, ``--plugin
        FILE``)."""
        self.get(name)
        return self._origins.get(name, "built-in")

    def __contains__(self, name: object) -> bool:
        return name in self._paths

    def names(self) -> list[str]:
        return list(self._paths)

    def get(self, name: str) -> GemmPath:
        try:
            return self._paths[name]
        except KeyError:
            raise ValueError(
                f"unknown path {name!r}; valid paths: {', '.join(self.names())}") from None

    def select(self, names: list[str] | None) -> list[GemmPath]:
        return [self.get(n) for n in names] if names else list(self._paths.values())


#: The one path registry. ``harness.kernels.registry_load.load_all()`` registers the
#: built-in paths; plugins register theirs.
PATHS = PathRegistry()
