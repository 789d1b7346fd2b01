"""The one interface every GEMM path implements, and the path registry.

Extension point: a new path is one module under ``harness/kernels/`` defining a subclass
of ``GemmPath`` and registering one instance::

    class MyPath(GemmPath):
        name = "my_path"
        role = "path"            # "path" (TinyLoop ships it) or "peer" (comparison column)
        description = "what it is"

        def unavailable_reason(self, device): return None or "why not here"
        def prepare(self, weight, device): ...  # all load-time work, returns Prepared
        def run(self, prepared, A, out): ...     # writes C into ``out`` and returns it

    PATHS.register(MyPath())

Contract:
  * ``prepare`` does every load-time step (packing, dequant caches, workspaces, scratch)
    and is never timed as part of ``run``; ``Prepared.extra_bytes`` reports the device
    memory it holds beyond the quantized weight's own packed size.
  * ``run(prepared, A, out)`` must write every element of ``out`` ([M, N], dtype
    ``prepared.output_dtype``) and return it. ``A`` is [M, K] of ``prepared.input_dtype``
    on the path's device (the runner converts outside any timing). ``run`` never times
    itself and never synchronises the device.
  * A kernel that reports failure (e.g. Marlin's non-zero return code) raises
    ``KernelReturnCode`` so the runner records ERROR/fallback with the reason.
  * ``implementation(device)`` names what really runs there (e.g. on a CPU the
    native-INT4 row is the fp32 torch reference, and says so).
  * ``nondeterminism`` is empty when the path promises bitwise-identical outputs for
    identical inputs (the runner checks it over ``accuracy_runs`` runs and the gate
    fails a row that breaks it); a path whose kernel is documented to vary between runs
    says why in one line (the gate then reports the variation without failing, unless
    ``fail_on_nondeterminism``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.cases.data import QuantizedWeight


class KernelReturnCode(RuntimeError):
    """A kernel returned a non-zero status instead of computing C."""

    def __init__(self, path: str, rc: int, detail: str = "") -> None:
        self.path, self.rc, self.detail = path, rc, detail
        super().__init__(f"{path}: kernel returned rc={rc}" + (f" ({detail})" if detail else ""))


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
    role: str = "path"
    description: str = ""
    #: "" = bitwise-identical outputs for identical inputs; else why they may vary
    nondeterminism: str = ""

    @abstractmethod
    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when the path can run on ``device``; otherwise a one-line reason."""

    @abstractmethod
    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        """All load-time work for ``weight`` on ``device``."""

    @abstractmethod
    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """C = A @ W written into ``out`` (every element) and returned."""

    def unsupported_reason(self, case) -> str | None:
        """None when the path has a kernel for ``case``'s shape; else a one-line reason.

        For shape limits known before the call (e.g. Marlin has no kernel for N % 256 != 0
        at M > 16): a path forced onto such a case is reported ``unavailable`` with this
        reason instead of an ERROR. A kernel that returns a failure code on a shape this
        method accepted is still an ERROR.
        """
        return None

    def implementation(self, device: torch.device) -> str:
        """What actually runs on ``device`` (shown in result rows)."""
        return self.description

    def prepare_timed(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        """``prepare`` with its wall time recorded (load time, synchronised; not a kernel timing)."""
        import time

        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        prepared = self.prepare(weight, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        prepared.prepare_seconds = time.perf_counter() - t0
        return prepared


class PathRegistry:
    """Name -> path instance. Order of registration is the order of report columns."""

    def __init__(self) -> None:
        self._paths: dict[str, GemmPath] = {}

    def register(self, path: GemmPath) -> GemmPath:
        if not path.name:
            raise ValueError(f"{type(path).__name__} has no name")
        if path.name in self._paths:
            raise ValueError(f"path {path.name!r} is registered twice")
        if path.role not in ("path", "peer"):
            raise ValueError(f"path {path.name!r}: role must be 'path' or 'peer', got {path.role!r}")
        self._paths[path.name] = path
        return path

    def names(self) -> list[str]:
        return list(self._paths)

    def get(self, name: str) -> GemmPath:
        try:
            return self._paths[name]
        except KeyError:
            raise ValueError(f"unknown path {name!r}; valid paths: {', '.join(self.names())}") from None

    def select(self, names: list[str] | None) -> list[GemmPath]:
        return [self.get(n) for n in names] if names else list(self._paths.values())


#: The one path registry. Path modules register themselves on import
#: (``harness.kernels.load_all()`` imports every path module).
PATHS = PathRegistry()
