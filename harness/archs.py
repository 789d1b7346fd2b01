"""The GPU architectures the harness knows by name: one table for ``harness build --arch``,
the extension build and the docs (``noxfile.py`` keeps its own ``ARCHS`` dict, since a
noxfile cannot import the harness; ``tests/unit/test_fleet_build.py`` checks both agree).

An arch is named ``smXY`` (``sm90``), as results and baselines are filed; ``parse_arch``
also takes ``sm_90``, ``SM90`` and ``9.0``. A name outside ``KNOWN_ARCHS`` is refused with
one line listing the known ones. A GPU of an unlisted capability still builds and runs
(``Arch.of``): the table only names what can be asked for without that GPU.

Lowest layer: pure data, no torch, nothing of the harness imported.
Extension point: a new arch is one ``Arch`` line in ``KNOWN_ARCHS`` (and one entry in
``noxfile.py``'s ``ARCHS`` for its ``bench-smXY`` session).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class UnknownArchError(ValueError):
    """An arch name the harness does not know (one line listing the known ones)."""


@dataclass(frozen=True)
class Arch:
    """One GPU architecture: ``name`` ``sm90``, ``capability`` (9, 0), example GPUs."""

    name: str
    capability: tuple[int, int]
    gpus: str = ""

    @property
    def tag(self) -> str:
        """The digits nvcc uses: ``90`` (``compute_90``, ``sm_90``), ``120`` for 12.0."""
        return f"{self.capability[0]}{self.capability[1]}"

    @property
    def sm(self) -> str:
        """``sm_90``: the name of its SASS in a binary (``cuobjdump --list-elf``)."""
        return f"sm_{self.tag}"

    @property
    def dotted(self) -> str:
        """``9.0``: the compute capability as torch and NVIDIA write it."""
        return f"{self.capability[0]}.{self.capability[1]}"

    @classmethod
    def of(cls, major: int, minor: int) -> Arch:
        """The known arch of this compute capability, or an unnamed-GPU one (``sm87``)."""
        for arch in KNOWN_ARCHS.values():
            if arch.capability == (major, minor):
                return arch
        return cls(f"sm{major}{minor}", (major, minor))


#: Every arch ``harness build --arch`` and the ``bench-smXY`` nox sessions know, oldest first.
KNOWN_ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("sm75", (7, 5), "Turing: T4, RTX 20xx"),
    Arch("sm80", (8, 0), "Ampere: A100, A30"),
    Arch("sm86", (8, 6), "Ampere: A10, A40, RTX 30xx"),
    Arch("sm89", (8, 9), "Ada: L4, L40S, RTX 40xx"),
    Arch("sm90", (9, 0), "Hopper: H100, H200"),
    Arch("sm100", (10, 0), "Blackwell: B200, GB200"),
    Arch("sm120", (12, 0), "Blackwell: RTX 50xx, RTX PRO 6000"),
)}

_SM = re.compile(r"^sm_?(\d)(\d)$|^sm_?(1\d)(\d)$")
_DOTTED = re.compile(r"^(\d{1,2})\.(\d)$")


def _known_list() -> str:
    return ", ".join(KNOWN_ARCHS)


def parse_arch(text: str) -> Arch:
    """``sm90`` / ``sm_90`` / ``SM90`` / ``9.0`` -> the known ``Arch``; ``UnknownArchError``
    (one line listing the known ones) for anything else."""
    word = str(text).strip().lower()
    cap: tuple[int, int] | None = None
    m = _SM.match(word)
    if m:
        major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        cap = (int(major), int(minor))
    else:
        d = _DOTTED.match(word)
        if d:
            cap = (int(d.group(1)), int(d.group(2)))
    for arch in KNOWN_ARCHS.values():
        if arch.capability == cap:
            return arch
    raise UnknownArchError(f"unknown arch {text!r}: known archs are {_known_list()} "
                           "(also written sm_90 or 9.0), or 'all'")


def parse_arch_list(text: str) -> list[Arch]:
    """``"sm75,sm_80, 9.0"`` -> those archs in order, each once; ``"all"`` -> every known arch.
    An empty list or an unknown name raises ``UnknownArchError``."""
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    if not words:
        raise UnknownArchError(f"no arch given: known archs are {_known_list()}, or 'all'")
    if any(w.lower() == "all" for w in words):
        return list(KNOWN_ARCHS.values())
    out: list[Arch] = []
    for word in words:
        arch = parse_arch(word)
        if arch not in out:
            out.append(arch)
    return out
