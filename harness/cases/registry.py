"""The shape-matrix registry: named functions that return lists of cases.

Extension point: a new matrix is one function decorated with ``@MATRICES.register``::

    @MATRICES.register("mine", "what it is for")
    def mine() -> list[GemmCase]:
        return [GemmCase(M=16, N=4096, K=4096, group_size=128, tags=("mine",))]

The function must be deterministic and cheap (it builds records, never tensors). Case
ids must be unique within a matrix; duplicates are rejected when the matrix is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .case import GemmCase
from .filters import apply_filter


class UnknownMatrixError(KeyError):
    """Raised for a matrix name that is not registered; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its message; we want one plain line
        return str(self.args[0])


@dataclass(frozen=True)
class MatrixSpec:
    name: str
    description: str
    build: Callable[[], list[GemmCase]]


class MatrixRegistry:
    """Holds named matrices; ``cases(name, filter)`` builds, validates and filters one."""

    def __init__(self) -> None:
        self._specs: dict[str, MatrixSpec] = {}

    def register(self, name: str, description: str):
        def deco(fn: Callable[[], list[GemmCase]]):
            if name in self._specs:
                raise ValueError(f"matrix {name!r} is registered twice")
            self._specs[name] = MatrixSpec(name, description, fn)
            return fn

        return deco

    def names(self) -> list[str]:
        return list(self._specs)

    def spec(self, name: str) -> MatrixSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownMatrixError(
                f"unknown matrix {name!r}; valid matrices: {', '.join(self.names())}"
            ) from None

    def cases(self, name: str, filter_expr: str | None = None) -> list[GemmCase]:
        spec = self.spec(name)
        built = [c.with_tags(name) for c in spec.build()]
        seen: dict[str, GemmCase] = {}
        for case in built:
            if case.id in seen:
                raise ValueError(f"matrix {name!r} has the case id {case.id} twice")
            seen[case.id] = case
        return apply_filter(built, filter_expr)


#: The one registry object. Matrices register themselves in ``harness.cases.matrices``.
MATRICES = MatrixRegistry()
