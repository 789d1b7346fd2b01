"""``harness bench --gpus``: one run of a matrix spread over several devices of one host.

One worker per ``--gpus`` entry: a ``ProcessPoolExecutor`` of one spawned process, pinned
to its GPU by CUDA_VISIBLE_DEVICES before it imports torch. Cases go out longest first
(``case_cost``) to whichever worker is free, so the devices finish together. The parent
measures nothing: it writes each finished case's rows through the run's one ``RowWriter``
(fsynced, locked, ``--resume`` as for one device), puts the CSV in the single-device order
at the end, and the bench gates the merged rows as usual; a row the gate measures again
goes back to the device that measured it. Rows name their device (``gpu_index``,
``gpu_uuid``); the json lists the devices and their ceilings (``devices``; the run's own
ceilings are the first device's). The devices must be one GPU model: a run is gated
against one model's baseline.

A worker that dies (the OOM killer, a kernel fault) loses only its case in flight: its
executor starts again, the case goes once more to another device (the same one if there is
no other), and a second loss writes the case's rows as ``error`` rows naming both. A worker
lost on two cases in a row is retired. One executor per device, not one pool: a pool whose
worker dies terminates all its workers, and every device's case in flight with them.

On a CPU, ``--gpus 0,1`` starts CPU workers standing in for devices (``gpu_uuid``
``cpu:<i>``): the test suite's way to run this without a GPU. Entries may repeat (``0,0``:
two workers share a GPU; a check of the sharding, not a measurement).
Extension point: ``case_cost(case)`` orders the cases. Torch-free at import (the worker's
initializer lives here); the worker imports the engine after its device is pinned.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from collections import deque
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..results.environment import Environment, measured_settings
from ..results.schema import ResultRow
from ..results.store import RunMeta, read_meta, read_rows, run_dir, write_meta
from ..results.writer import RowWriter, resume_difference
from . import shard_worker
from .shard_worker import WorkerSpec

#: losses of one case before its rows are written as errors
MAX_ATTEMPTS = 2


def parse_gpus(text: str, visible: int, on_cpu: bool) -> list[int]:
    """The device of each worker from ``--gpus``: ``all`` (every visible GPU) or a comma
    list of host indices (repeats allowed: several workers on one device). On a CPU the
    indices name stand-in devices. Bad input raises ValueError with a one-line message."""
    text = (text or "").strip()
    if text == "all":
        if on_cpu:
            raise ValueError("--gpus all: no GPU is used here; on a CPU name the stand-in "
                             "devices, e.g. --gpus 0,1")
        if visible < 1:
            raise ValueError("--gpus all: no CUDA GPU is visible")
        return list(range(visible))
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"--gpus: {part!r} is not a device index (all, or a comma list "
                             "such as 0,1,3)")
        if not on_cpu and int(part) >= visible:
            raise ValueError(f"--gpus: there is no GPU {part} ({visible} visible: "
                             f"0..{visible - 1})")
        out.append(int(part))
    return out


def mixed_models(workers) -> str | None:
    """Why the workers (their ``hello`` dicts) cannot make one run: GPUs of several models
    (a run is gated against one model's baseline); None when they are one model."""
    names = sorted({w["gpu_name"] for w in workers})
    if len(names) < 2:
        return None
    listed = ", ".join(f"{name}: devices "
                       + ",".join(str(w["gpu_index"]) for w in workers if w["gpu_name"] == name)
                       for name in names)
    return (f"--gpus: the devices are of different models ({listed}); a run is gated against "
            "one model's baseline: list one model's GPUs")


def case_cost(case) -> float:
    """Estimated cost of measuring ``case`` (any unit; only the order counts): its FLOPs,
    its bytes at 100 FLOP per byte, and a fixed part for the per-case set-up (data, fp64
    reference, graph captures) that dominates small cases."""
    flops = 2.0 * case.M * case.N * case.K
    nbytes = case.N * case.K / 2 + 2.0 * case.M * (case.K + case.N)
    return flops + 100.0 * nbytes + 2e9


# ------------------------------------------------------------------------- the parent side
class ShardedBench:
    """The parent of a sharded run: its workers, and ``measure`` / ``remeasure_hook`` /
    ``measured`` / ``env_record`` as ``harness.measure.session.BenchSession`` has them."""

    def __init__(self, specs: list[WorkerSpec], *, commit: str, arch: str, settings,
                 modes, paths, out: Path, resume: bool, overwrite: bool, extra: dict,
                 partial: bool | str, echo=print) -> None:
        self.specs = {s.slot: s for s in specs}
        self.commit, self.arch, self.settings = commit, arch, settings
        self.modes, self.paths, self.out = tuple(modes), list(paths), Path(out)
        self.resume, self.overwrite, self.partial = resume, overwrite, partial
        self.extra, self.echo = dict(extra), echo
        self.rows: dict[tuple[str, str], list[ResultRow]] = {}
        self.cases: dict[str, list] = {}
        self._mp = multiprocessing.get_context("spawn")
        self.execs = {slot: self._start(spec) for slot, spec in self.specs.items()}
        self.deaths = dict.fromkeys(self.specs, 0)
        self.info = self._hello()
        #: a restarted worker's hello, read into ``info`` when the run's json is written
        self._rehello: dict[int, cf.Future] = {}

    def _start(self, spec: WorkerSpec) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=1, mp_context=self._mp,
                                      initializer=shard_worker.init_worker, initargs=(spec,))

    def _hello(self) -> dict[int, dict]:
        futures = {slot: ex.submit(shard_worker.hello) for slot, ex in self.execs.items()}
        info = {}
        for slot, fut in futures.items():
            try:
                info[slot] = fut.result()
            except Exception as exc:                 # a device that cannot start: retire it
                self.echo(f"harness bench: --gpus: the worker of device "
                          f"{self.specs[slot].device} did not start ({_why(exc)}); retired")
                self._retire(slot)
        if not info:
            raise RuntimeError("--gpus: no worker started")
        why = mixed_models(info.values())
        if why:
            self.close()
            raise ValueError(why)
        for i in info.values():
            self.echo(f"harness bench: worker {i['slot']} on {i['gpu_name']} (device "
                      f"{i['gpu_index']}, {i['gpu_uuid'] or 'no uuid'}), pid {i['pid']}")
        return info

    def _retire(self, slot: int) -> None:
        self.execs.pop(slot).shutdown(wait=False, cancel_futures=True)

    def close(self, abort: bool = False) -> None:
        """Shut the workers down; with ``abort`` (an interrupted run) stop their cases in
        flight too (SIGTERM), so the run ends now rather than after each worker's case: its
        rows were never written, and ``--resume`` measures them. The parent of a sharded run
        starts no other multiprocessing children, so they are all workers."""
        for slot in list(self.execs):
            self._retire(slot)
        if abort:
            for child in multiprocessing.active_children():
                child.terminate()

    # -- records -----------------------------------------------------------------------
    def run_dir(self, suffix: str = "") -> Path:
        return run_dir(self.out, self.commit, self.arch + suffix)

    def _first(self) -> dict:
        return self.info[min(self.info)]

    def env_record(self) -> Environment:
        """The first device's environment (all devices are one model), with every device's
        uuid under ``gpu_uuids`` (comma list, in slot order): a baseline recorded from the
        run names them all."""
        uuids = ",".join(dict.fromkeys(i["gpu_uuid"] for _, i in sorted(self.info.items())))
        return Environment.from_dict({**self._first()["env"], "commit": self.commit,
                                      "gpu_uuids": uuids})

    def measured(self) -> dict:
        return measured_settings(self.settings.to_dict(), {**self.extra, "modes": list(self.modes)})

    def _refresh(self) -> None:
        """Fold the hello of each restarted worker that has answered into ``info``: its
        pid now, every pid the slot had (``pids``) and its ``restarts``."""
        for slot, fut in list(self._rehello.items()):
            if not fut.done():
                continue
            del self._rehello[slot]
            old = self.info.get(slot)
            if old is None or fut.exception() is not None:
                continue                                # died again: the next death says so
            pids = [*old.get("pids", [old["pid"]]), fut.result()["pid"]]
            self.info[slot] = {**old, "pid": pids[-1], "pids": pids,
                               "restarts": old.get("restarts", 0) + 1}

    def _meta(self, matrix: str, notes: dict, wall: dict) -> RunMeta:
        self._refresh()
        first = self._first()
        devices = [{**{k: i[k] for k in ("slot", "gpu_index", "gpu_uuid", "gpu_name", "pid",
                                         "ceilings")},
                    "pids": i.get("pids", [i["pid"]]), "restarts": i.get("restarts", 0)}
                   for _, i in sorted(self.info.items())]
        extra = {**self.extra, "modes": list(self.modes), "paths": list(self.paths),
                 "ceilings_detail": first["ceilings_detail"], "devices": devices,
                 "row_notes": dict(sorted(notes.items())), "wall_s_by_stage": dict(wall)}
        return RunMeta(matrix=matrix, commit=self.commit, arch=self.arch,
                       environment=self.env_record(), ceilings=first["ceilings"],
                       settings=self.settings.to_dict(), extra=extra)

    # -- measuring ---------------------------------------------------------------------
    def measure(self, matrix: str, cases: list) -> list[ResultRow]:
        """Measure ``cases`` over the workers into ``<run dir>/<matrix>.csv``; returns the
        rows, in the order one device would have written them."""
        self.cases[matrix] = list(cases)
        csv_path = self.run_dir() / f"{matrix}.csv"
        notes: dict[str, str] = {}
        if self.resume and csv_path.with_suffix(".json").is_file():
            stored = read_meta(csv_path.with_suffix(".json"))
            why = resume_difference(stored, self._meta(matrix, {}, {}))
            if why:
                raise ValueError(f"--resume: {csv_path} was measured with {why}; resume it with "
                                 "the same options, or start over with --overwrite")
            notes.update({str(k): str(v) for k, v in stored.extra.get("row_notes", {}).items()})
        mode = "resume" if self.resume else ("overwrite" if self.overwrite else "new")
        try:
            writer = RowWriter(csv_path, meta=self._meta(matrix, notes, {}), mode=mode).open()
        except FileExistsError as exc:
            raise ValueError(f"{exc} (--resume continues it, --overwrite replaces it)") from None
        except RuntimeError as exc:                 # StoreLockedError: another writer
            raise ValueError(str(exc)) from None
        wall: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            if writer.existing:
                self.echo(f"harness bench: resuming {csv_path}: {len(writer.existing)} rows done")
            self._sweep(matrix, cases, writer, notes, wall)
            rank = {c.id: i for i, c in enumerate(cases)}     # a case's rows stay in its order
            writer.reorder(lambda row: rank.get(row.case_id, len(rank)))
        finally:
            try:   # also when interrupted: the notes of the rows on disk survive --resume
                write_meta(csv_path.with_suffix(".json"),
                           self._meta(matrix, notes, {k: round(v, 2) for k, v in wall.items()}))
            finally:
                writer.close()
        rows = read_rows(csv_path)
        self.rows[(matrix, "")] = rows
        self.echo(f"harness bench: {len(rows)} rows in {csv_path} ({time.perf_counter() - t0:.1f}"
                  f" s wall on {len(self.execs)} workers)")
        return rows

    def _sweep(self, matrix: str, cases: list, writer: RowWriter, notes: dict,
               wall: dict) -> None:
        done = writer.done_keys
        pending = deque((c, 0, None) for c in sorted(cases, key=case_cost, reverse=True))
        running: dict[cf.Future, tuple[int, object, int]] = {}
        losses: dict[str, list[str]] = {}
        while pending or running:
            busy = {slot for slot, _, _ in running.values()}
            for slot in [s for s in self.execs if s not in busy]:
                item = self._take(pending, slot)
                if item is not None:
                    case, attempt, _ = item
                    skip = frozenset(k for k in done if k[0] == case.id)
                    fut = self.execs[slot].submit(shard_worker.measure_case, matrix, case, skip)
                    running[fut] = (slot, case, attempt)
            if not running:
                raise RuntimeError("--gpus: every worker was retired; "
                                   f"{len(pending)} cases not measured")
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                slot, case, attempt = running.pop(fut)
                try:
                    result = fut.result()
                except Exception as exc:
                    busy = {s for s, _, _ in running.values()}
                    self._case_lost(matrix, case, attempt, slot, exc, pending, losses, writer,
                                    busy)
                    continue
                self.deaths[slot] = 0
                have = writer.done_keys
                for row in result.rows:
                    if row.key not in have:
                        writer.write(row)
                notes.update(result.notes)
                for stage, seconds in result.wall.items():
                    wall[stage] = wall.get(stage, 0.0) + seconds

    def _take(self, pending: deque, slot: int):
        """The first pending case that may go to ``slot``: a retry avoids the device that
        lost it, unless every live worker is on that device."""
        device = self.specs[slot].device
        others = {self.specs[s].device for s in self.execs} - {device}
        for i, (case, attempt, avoid) in enumerate(pending):
            if avoid != device or not others:
                del pending[i]
                return case, attempt, avoid
        return None

    def _case_lost(self, matrix, case, attempt, slot, exc, pending, losses, writer,
                   busy: set) -> None:
        spec = self.specs[slot]
        died = isinstance(exc, BrokenProcessPool)
        what = f"the worker of device {spec.device} " + ("died" if died else "failed")
        losses.setdefault(case.id, []).append(f"{what}: {_why(exc)}")
        self.echo(f"harness bench: {case.id}: {what} ({_why(exc)}); "
                  + ("retried on another device" if attempt + 1 < MAX_ATTEMPTS
                     else "its rows are errors"))
        if died:
            self.deaths[slot] += 1
            if self.deaths[slot] >= 2:
                self.echo(f"harness bench: --gpus: the worker of device {spec.device} died on "
                          "two cases in a row; retired")
                self._retire(slot)
            else:
                self.execs[slot] = self._start(spec)
                self._rehello[slot] = self.execs[slot].submit(shard_worker.hello)
        if attempt + 1 < MAX_ATTEMPTS:
            pending.appendleft((case, attempt + 1, spec.device))
            return
        reason = f"not measured: lost {MAX_ATTEMPTS} times ({'; '.join(losses[case.id])})"
        info = self.info.get(slot, {})
        device = (info.get("gpu_index", spec.device), info.get("gpu_uuid", ""))
        skip = frozenset(k for k in writer.done_keys if k[0] == case.id)
        # an idle worker writes them (a busy one would hold the sweep until its case ends)
        for _, other in sorted(self.execs.items(), key=lambda item: item[0] in busy):
            try:
                rows = other.submit(shard_worker.lost_rows, matrix, case, skip, reason,
                                    device).result()
            except Exception:                          # that worker is gone too: try the next
                continue
            for row in rows:
                writer.write(row)
            return
        raise RuntimeError(f"--gpus: {case.id}: {reason}, and no worker is left to record it")

    def remeasure_hook(self, matrix: str):
        """The gate's ``remeasure(keys)``: each key measured again by the device that
        measured its row (by the first live worker when that one is gone)."""
        by_key = {r.key: r for r in self.rows.get((matrix, ""), [])}
        slot_of = {i["gpu_uuid"]: slot for slot, i in self.info.items()}

        def remeasure(keys):
            groups: dict[int, list] = {}
            for key in keys:
                row = by_key.get(tuple(key))
                slot = slot_of.get(row.gpu_uuid) if row is not None else None
                groups.setdefault(slot if slot in self.execs else min(self.execs), []).append(key)
            cases = self.cases[matrix]
            futures = {slot: self.execs[slot].submit(shard_worker.remeasure_keys, matrix, cases, ks)
                       for slot, ks in groups.items()}
            rows = []
            for slot, fut in futures.items():
                try:
                    rows += fut.result()
                except Exception as exc:       # those rows keep their first measurement
                    self.echo(f"harness bench: measuring {len(groups[slot])} rows again on "
                              f"device {self.specs[slot].device} failed ({_why(exc)})")
            return rows

        return remeasure


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
