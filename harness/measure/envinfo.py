"""The environment a run was measured in, the arch label, and the SM clock (NVML).

``environment(device)`` returns a flat dict (GPU name and uuid, compute capability, driver,
CUDA, torch, optimum-quanto version, git commit with '-dirty', python, hostname, the
machine's boot id and, through NVML, the max and application/default SM clocks and the
power limit) written into every run's metadata JSON (keys named as
``harness.results.environment.Environment``'s fields: gpu_name, gpu_uuid,
compute_capability, driver, cuda, torch, quanto, commit, python, host, boot_id,
sm_clock_max_mhz, sm_clock_app_mhz, sm_clock_default_mhz, power_limit_w, platform, date;
the rest land in its ``extra``) and into pytest-benchmark's machine_info. Unknown facts
are "" (never an error), with the reason under ``notes`` where there is one; nothing is
guessed.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch


def git_commit(repo: str | Path | None = None) -> str:
    """Short commit of ``repo`` (default: this checkout) + '-dirty' when files changed.

    'unknown' outside a git checkout (e.g. an installed wheel). ``$HARNESS_COMMIT``, when
    set, is used instead: for a copy of a checkout without its .git (a GPU machine that
    receives only the working tree).
    """
    if os.environ.get("HARNESS_COMMIT"):
        return os.environ["HARNESS_COMMIT"]
    cwd = Path(repo) if repo else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd,
                             capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def arch_label(device: torch.device | str) -> str:
    """'smXY' from the device's compute capability, or 'cpu'."""
    device = torch.device(device)
    if device.type != "cuda":
        return "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- NVML
_NVML_STATE: dict = {}


def _nvml():
    """The pynvml module, initialised once, or raise ImportError/RuntimeError with why."""
    if "mod" in _NVML_STATE:
        return _NVML_STATE["mod"]
    if "error" in _NVML_STATE:
        raise RuntimeError(_NVML_STATE["error"])
    try:
        import pynvml  # optional: nvidia-ml-py (clocks, power limit, driver)
    except ImportError:
        _NVML_STATE["error"] = "pynvml (nvidia-ml-py) is not installed"
        raise RuntimeError(_NVML_STATE["error"]) from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml raises its own NVMLError subclasses
        _NVML_STATE["error"] = f"nvmlInit failed: {exc}"
        raise RuntimeError(_NVML_STATE["error"]) from None
    _NVML_STATE["mod"] = pynvml
    return pynvml


def _nvml_handle(device: torch.device):
    nv = _nvml()
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:                       # robust to CUDA_VISIBLE_DEVICES reordering
        dom, dev = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        try:
            return nv.nvmlDeviceGetHandleByPciBusId(f"{dom:08x}:{bus:02x}:{dev:02x}.0".encode())
        except Exception:  # fall back to the index
            pass
    return nv.nvmlDeviceGetHandleByIndex(device.index or 0)


def nvml_device(device: torch.device | str):
    """(the initialised pynvml module, the NVML handle of ``device``); raises
    ``RuntimeError`` saying why when NVML cannot be used (no pynvml, no driver)."""
    try:
        return _nvml(), _nvml_handle(torch.device(device))
    except RuntimeError:
        raise
    except Exception as exc:  # pynvml's own NVMLError subclasses
        raise RuntimeError(f"no NVML handle for {device}: {exc}") from None


def sm_clock_reader(device: torch.device | str):
    """A function returning (current SM clock MHz, note); (NaN, reason) when unreadable."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    try:
        nv = _nvml()
        handle = _nvml_handle(device)
    except Exception as exc:
        reason = f"SM clock not recorded: {exc}"
        return lambda: (math.nan, reason)

    def read() -> tuple[float, str]:
        try:
            return float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)), ""
        except Exception as exc:
            return math.nan, f"SM clock not recorded: {exc}"

    return read


def _driver_version() -> tuple[str | None, str]:
    try:
        nv = _nvml()
        v = nv.nvmlSystemGetDriverVersion()
        return (v.decode() if isinstance(v, bytes) else str(v)), ""
    except Exception as exc:
        nvml_note = str(exc)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0], ""
    except (OSError, subprocess.SubprocessError):
        pass
    return None, f"driver version unknown ({nvml_note}; nvidia-smi unavailable)"


def _boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    """This boot of this machine (Linux); "" where unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _number(value) -> str:
    """An NVML number as a string ('1980', '700'); "" for nothing."""
    if value is None:
        return ""
    value = float(value)
    return f"{value:g}" if math.isfinite(value) else ""


def nvml_facts(device: torch.device | str) -> tuple[dict[str, str], str]:
    """Max SM clock, application and default application SM clocks (MHz), power limit (W).

    Each is read on its own; an unreadable one (no pynvml, no permission, not supported
    on this GPU) is "" and the first reason is returned as the note.
    """
    device = torch.device(device)
    facts = dict.fromkeys(("sm_clock_max_mhz", "sm_clock_app_mhz", "sm_clock_default_mhz",
                           "power_limit_w"), "")
    if device.type != "cuda":
        return facts, ""
    try:
        nv = _nvml()
        handle = _nvml_handle(device)
    except Exception as exc:
        return facts, f"clocks and power limit not recorded: {exc}"
    reads = {
        "sm_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM),
        "sm_clock_app_mhz": lambda: nv.nvmlDeviceGetApplicationsClock(handle, nv.NVML_CLOCK_SM),
        "sm_clock_default_mhz":
            lambda: nv.nvmlDeviceGetDefaultApplicationsClock(handle, nv.NVML_CLOCK_SM),
        "power_limit_w": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
    }
    notes = []
    for key, read in reads.items():
        try:
            facts[key] = _number(read())
        except Exception as exc:  # pynvml raises its own NVMLError subclasses
            notes.append(f"{key} not recorded: {exc}")
    return facts, notes[0] if notes else ""


def environment(device: torch.device | str) -> dict:
    """Flat, JSON-ready description of the machine and software a run measured."""
    device = torch.device(device)
    notes = []
    env = {
        "arch": arch_label(device),
        "device_type": device.type,
        "gpu_name": "",
        "gpu_uuid": "",
        "compute_capability": "",
        "driver": "",
        "cuda": torch.version.cuda or "",
        "torch": torch.__version__,
        "quanto": _version("optimum-quanto") or "",
        "harness": _version("int4-gemm-harness"),
        "numpy": _version("numpy"),
        "commit": git_commit(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "boot_id": _boot_id(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
    }
    if not env["quanto"]:
        notes.append("optimum-quanto is not installed")
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu_name"] = props.name
        env["compute_capability"] = f"{props.major}.{props.minor}"
        env["sm_count"] = props.multi_processor_count
        env["gpu_uuid"] = str(getattr(props, "uuid", "") or "")   # which physical GPU
        env["l2_cache_bytes"] = int(props.L2_cache_size)
        env["total_memory_bytes"] = int(props.total_memory)
        driver, note = _driver_version()
        env["driver"] = driver or ""
        if note:
            notes.append(note)
    facts, note = nvml_facts(device)
    env.update(facts)
    if note:
        notes.append(note)
    if device.type == "cuda":
        reader = sm_clock_reader(device)
        mhz, note = reader() if reader else (math.nan, "")
        env["sm_clock_mhz_at_start"] = None if math.isnan(mhz) else mhz
        if note:
            notes.append(note)
    # The dispatcher model's switches change the dispatch_path column: record them.
    for var in ("TINYLOOP_USE_MARLIN", "HARNESS_MARLIN_SM90", "HARNESS_MARLIN_PROVIDER"):
        env[var.lower()] = os.environ.get(var, "")
    env["harness_dispatch_policy"] = _policy_stamp(os.environ.get("HARNESS_DISPATCH_POLICY", ""))
    env["date"] = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    env["notes"] = "; ".join(notes)
    return env


def _policy_stamp(path: str) -> str:
    """A dispatch policy file as the environment records it: its content's SHA-256 (12
    hex digits), never its path on this machine; "" when none is set or it is unreadable."""
    if not path.strip():
        return ""
    try:
        return "sha256:" + hashlib.sha256(open(path, "rb").read()).hexdigest()[:12]
    except OSError:
        return ""
