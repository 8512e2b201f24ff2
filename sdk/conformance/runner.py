"""Select conformance items and run them in a pool of worker processes, a record per item.

An item is one (kernel, case, dtype) on one backend name (a variant such as `nvidia_ref@sm_90/compile`
when several archs are compiled for). Workers (`python -m sdk.conformance.worker`) are long-lived:
each imports torch, Triton and the suite once and runs items one at a time. A worker that dies
(a segfault in a backend) yields a `crash` record naming the signal; one that exceeds the per-item
timeout is killed and yields a `timeout` record; either way a fresh worker takes the remaining items.

Containment: each worker leads its own process group, and a crashed or timed-out worker's group is
killed (a backend's forked children go with it); a worker whose runner dies (kill -9) kills its own
group. A worker whose memory grows past DAY0_WORKER_MEMORY_MB (default 2048) since its first item is
recycled after the item, which says so. An item that runs out of memory (status `resource`: no
verdict on the kernel) is retried alone once the others are done. With several devices
(DAY0_DEVICES="0,1", or the visible CUDA devices when a selected backend runs on CUDA) each worker
is pinned to one (CUDA_VISIBLE_DEVICES), spread evenly.

Extra kernel modules (a vendor's own kernels) are imported from `DAY0_KERNELS="pkg.mod,pkg.other"`,
in the runner and in every worker, before the suite is read.

Several workers share the host's cores: with jobs > 1 each worker gets cores // jobs threads (at
least one) for torch's operations (OMP_NUM_THREADS) and for cpu_interp's compiled launches
(DAY0_CPU_THREADS), unless the environment sets those already; thread pools larger than their
share of the cores wait on each other and run many times slower.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..errors import ConfigError, Day0Error, UnknownName
from .results import PASSING, Record

KERNELS_ENV = "DAY0_KERNELS"
STARTUP_TIMEOUT_S = 300.0
MAX_FAILED_STARTS = 3
MEMORY_ENV, DEVICES_ENV = "DAY0_WORKER_MEMORY_MB", "DAY0_DEVICES"
LOG_PREFIX = "day0-workers-"


# ------------------------------------------------------------------------------------ suite
def load_suite() -> dict:
    """Every registered kernel: the shipped families plus the modules named in DAY0_KERNELS."""
    from .spec import registered
    for mod in filter(None, (m.strip() for m in os.environ.get(KERNELS_ENV, "").split(","))):
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise ConfigError(f"{KERNELS_ENV}: cannot import kernel module '{mod}' ({exc})") from None
    return registered()


def model_kernels(suite: dict) -> dict[str, list[str]]:
    """Model name -> the kernels it needs: the model manifests (sdk/conformance/models/*.yaml) are
    authoritative for the models they describe; a model that only kernels name (a vendor's own
    kernels, test suites) gets the kernels that declare it."""
    out: dict[str, list[str]] = {}
    try:
        from .manifests import load_manifests
    except ImportError:  # manifests not shipped in this build
        load_manifests = None
    if load_manifests is not None:
        for name, manifest in load_manifests().items():
            out[name] = list(manifest.kernels)
    derived: dict[str, list[str]] = {}
    for spec in suite.values():
        for model in spec.models:
            derived.setdefault(model, []).append(spec.name)
    for model, kernels in derived.items():
        out.setdefault(model, kernels)
    return out


def model_missing() -> dict[str, list[str]]:
    """Model name -> the kernel families its manifest says the suite does not cover."""
    try:
        from .manifests import load_manifests
    except ImportError:
        return {}
    return {name: [m.family for m in manifest.missing] for name, manifest in load_manifests().items()}


@dataclass(frozen=True)
class Item:
    kernel: str
    case: str
    dtype: str
    backend: str   # the backend name the worker activates (maybe a variant)
    arch: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.kernel, self.case, self.dtype, self.arch)

    @property
    def label(self) -> str:
        return f"{self.kernel}/{self.case}/{self.dtype}" + (f"@{self.arch}" if self.arch else "")


def _names(text: str | None) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in (text or "").split(",") if x.strip()))


def select(suite: dict, *, kernels: str | None = None, models: str | None = None,
           groups: str | None = None, full: bool = False) -> list[tuple[Any, Any, str]]:
    """(spec, case, dtype) for every selected kernel, in a stable order. Filters combine (a kernel
    must match every filter given). Unknown names raise UnknownName."""
    chosen = set(suite)
    if kernels is not None:
        want = _names(kernels)
        for k in want:
            if k not in suite:
                raise UnknownName("kernel", k, sorted(suite))
        chosen &= set(want)
    if models is not None:
        by_model = model_kernels(suite)
        keep: set[str] = set()
        for m in _names(models):
            if m not in by_model:
                raise UnknownName("model", m, sorted(by_model))
            keep |= set(by_model[m])
        chosen &= keep
    if groups is not None:
        known = sorted({s.group for s in suite.values()})
        want = _names(groups)
        for g in want:
            if g not in known:
                raise UnknownName("group", g, known)
        chosen &= {n for n, s in suite.items() if s.group in want}
    out = []
    for name in sorted(chosen, key=lambda n: (suite[n].group, n)):
        spec = suite[name]
        for case in spec.cases:
            if case.quick or full:
                for dtype in spec.dtypes:
                    out.append((spec, case, dtype))
    return out


_SHARD_RE = re.compile(r"^(\d+)/(\d+)$")


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' with 1 <= I <= N."""
    m = _SHARD_RE.match(text.strip())
    if not m or not (1 <= int(m.group(1)) <= int(m.group(2))):
        raise ConfigError(f"--shard '{text}' is not I/N with 1 <= I <= N (e.g. 1/4)")
    return int(m.group(1)), int(m.group(2))


def shard(items: list[Item], index: int, count: int) -> list[Item]:
    """Shard `index` (1-based) of `count`: every count-th item of the items sorted by key, so the
    shards are disjoint, cover everything, and do not depend on the order items were listed in."""
    ordered = sorted(items, key=lambda it: it.key)
    mine = {it.key for i, it in enumerate(ordered) if i % count == index - 1}
    return [it for it in items if it.key in mine]


# ---------------------------------------------------------------------------------- workers
def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


class _Worker:
    """One worker process, its result channel and stderr log."""

    def __init__(self, env: dict, log_dir: str, serial: int, device: str | None = None):
        self.device = device
        if device is not None:
            env = {**env, "CUDA_VISIBLE_DEVICES": device}
        self.rss0: float | None = None  # resident memory after its first item
        self.done = 0
        self.log_path = os.path.join(log_dir, f"worker{serial}.log")
        self.log = open(self.log_path, "ab")
        # -P: the working directory goes last on the worker's path (the worker appends it), so a
        # stray random.py or triton/ there cannot shadow the standard library or Triton
        safe = ["-P"] if sys.version_info >= (3, 11) else []
        self.proc = subprocess.Popen([sys.executable, *safe, "-m", "sdk.conformance.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.ready = False
        self.spawned = time.monotonic()
        self.item: Item | None = None
        self.started = 0.0
        self.log_offset = 0

    def send(self, item: Item) -> None:
        self.item = item
        self.started = time.monotonic()
        self.log.flush()
        self.log_offset = os.path.getsize(self.log_path)
        msg = {"backend": item.backend, "kernel": item.kernel, "case": item.case, "dtype": item.dtype}
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def read_lines(self) -> tuple[list[dict], bool]:
        """Complete messages available now, and whether the channel reached end of file."""
        eof = False
        while True:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self.buf += chunk
        msgs = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.strip():
                msgs.append(json.loads(line))
        return msgs, eof

    def stderr_tail(self, since: int = 0, limit: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(since, os.path.getsize(self.log_path) - limit))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def crash_site(self) -> str:
        """The innermost Python frame faulthandler printed for the fatal signal, if any."""
        text = self.stderr_tail(self.log_offset)
        frames = _FRAME_RE.findall(text.split("Fatal Python error", 1)[-1])
        if not frames:
            return ""
        path, line, func = frames[0]
        return f"{os.path.basename(path)}:{line} in {func}"

    def kill(self) -> None:
        """Kill the worker's whole process group: whatever it forked dies with it, even when the
        worker itself has already exited."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self.proc.poll() is None:
                self.proc.kill()
        self.close()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.log.close()


def device_slots(items: list[Item], env: dict) -> list[str]:
    """The devices to pin workers to: DAY0_DEVICES, else the visible CUDA devices when a selected
    backend runs on CUDA and there is more than one; [] means no pinning."""
    given = [d.strip() for d in env.get(DEVICES_ENV, "").split(",") if d.strip()]
    if given:
        return given
    from ..backend import registry
    try:
        on_cuda = any(str(registry.get(b).torch_device).startswith("cuda") for b in {it.backend for it in items})
    except Day0Error:
        return []
    if not on_cuda:
        return []
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible:
        try:
            import torch
            visible = [str(i) for i in range(torch.cuda.device_count())]
        except Exception:  # noqa: BLE001 - no usable CUDA: nothing to pin
            return []
    return visible if len(visible) > 1 else []


def thread_shares(jobs: int, cores: int | None = None) -> dict[str, str]:
    """The thread counts each of `jobs` workers gets on `cores` cores (default: those this process
    may run on); {} for a single worker, which keeps every default."""
    if jobs <= 1:
        return {}
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    share = str(max(1, cores // jobs))
    return {"OMP_NUM_THREADS": share, "DAY0_CPU_THREADS": share}


def _stale_log_dirs() -> None:
    """Log folders of runs that were killed (kill -9 gives no chance to clean up): removed when
    the process named in the folder is gone."""
    import shutil
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if not name.startswith(LOG_PREFIX):
            continue
        pid = name[len(LOG_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:
            pass


def run_items(items: Iterable[Item], on_result: Callable[[Item, dict], None], *, jobs: int = 1,
              timeout: float = 300.0, env: dict | None = None, _alone: bool = False) -> None:
    """Run every item in `jobs` worker processes; call `on_result(item, outcome)` as each finishes
    (outcome: the worker's fields, or a crash/timeout outcome made here). Items that run out of
    memory are run again, alone, at the end (see the module docstring)."""
    pending = deque(items)
    if not pending:
        return
    env = dict(os.environ if env is None else env)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    try:
        memory_mb = float(env.get(MEMORY_ENV) or 2048)
    except ValueError:
        raise ConfigError(f"{MEMORY_ENV} must be a number of MB, got '{env.get(MEMORY_ENV)}'") from None
    slots = device_slots(list(pending), env)
    jobs = max(1, min(jobs, len(pending)))
    env.update({k: v for k, v in thread_shares(jobs).items() if not env.get(k, "").strip()})
    sel = selectors.DefaultSelector()
    serial = 0
    failed_starts = 0
    workers: list[_Worker] = []
    retry: list[Item] = []
    _stale_log_dirs()
    log_dir = tempfile.mkdtemp(prefix=f"{LOG_PREFIX}{os.getpid()}-")

    def spawn() -> _Worker:
        nonlocal serial
        serial += 1
        device = None
        if slots:  # the least used device
            use = {d: sum(w.device == d for w in workers) for d in slots}
            device = min(slots, key=lambda d: (use[d], slots.index(d)))
        w = _Worker(env, log_dir, serial, device)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        workers.append(w)
        return w

    def retire(w: _Worker, kill: bool) -> None:
        sel.unregister(w.proc.stdout)
        workers.remove(w)
        w.kill() if kill else w.close()

    def report(item: Item, outcome: dict) -> None:
        if outcome.get("status") == "resource" and not _alone:
            retry.append(item)  # the device was shared: try again with nothing else running
            return
        if _alone and outcome.get("status") is not None:
            note = "run again alone after running out of memory beside other items"
            outcome = {**outcome, "detail": "; ".join(x for x in (outcome.get("detail", ""), note) if x)}
        on_result(item, outcome)

    def finish(w: _Worker, outcome: dict) -> bool:
        """Report; True when the worker grew past the memory limit and must be recycled."""
        item, w.item = w.item, None
        w.done += 1
        rss = outcome.pop("rss_mb", None)
        recycle = False
        if isinstance(rss, (int, float)):
            if w.rss0 is None:
                w.rss0 = rss
            elif rss - w.rss0 > memory_mb:
                recycle = True
                note = (f"worker grew {rss - w.rss0:.0f} MB over {w.done} item(s) (limit {memory_mb:g} MB, "
                        f"{MEMORY_ENV}); recycled")
                outcome = {**outcome, "detail": "; ".join(x for x in (outcome.get("detail", ""), note) if x)}
        report(item, outcome)
        return recycle

    def ended(w: _Worker) -> None:
        """The worker process is gone: its item (if any) crashed; its group is killed."""
        nonlocal failed_starts
        code = w.proc.wait()
        msgs, _ = w.read_lines()  # what it managed to say before it went
        for msg in msgs:
            if msg.get("ready"):
                w.ready = True
            elif w.item is not None and "status" in msg:
                finish(w, msg)
        if w.item is not None:
            how = (f"killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}")
            site = w.crash_site()
            elapsed = time.monotonic() - w.started
            finish(w, {"status": "crash", "wall_s": elapsed,
                       "detail": f"worker process {how}" + (f" at {site}" if site else "")})
        elif not w.ready:
            failed_starts += 1
            tail = " ".join(w.stderr_tail().strip().splitlines()[-3:])
            if failed_starts >= MAX_FAILED_STARTS:
                retire(w, kill=True)
                raise Day0Error(f"conformance worker failed to start (exit {code}): {tail}")
        retire(w, kill=True)  # its process group too: a child it forked must not outlive it
        if pending:
            spawn()

    try:
        for _ in range(jobs):
            spawn()
        while workers:
            for w in workers:
                if w.ready and w.item is None and pending:
                    w.send(pending.popleft())
            busy = [w for w in workers if w.item is not None]
            if not pending and not busy:
                break
            now = time.monotonic()
            deadlines = [w.started + timeout for w in busy]
            deadlines += [w.spawned + STARTUP_TIMEOUT_S for w in workers if not w.ready]
            wait = min(max(0.0, min(deadlines) - now) if deadlines else 1.0, 1.0)  # and look for exits
            for key, _ in sel.select(timeout=wait):
                w: _Worker = key.data
                if w not in workers:
                    continue
                msgs, eof = w.read_lines()
                recycle = False
                for msg in msgs:
                    if "fatal" in msg:
                        raise Day0Error(f"conformance worker failed to start: {msg['fatal']}")
                    if msg.get("ready"):
                        w.ready, failed_starts = True, 0
                    elif w.item is not None:
                        recycle = finish(w, msg) or recycle
                if eof:
                    ended(w)
                elif recycle:
                    retire(w, kill=False)
                    if pending:
                        spawn()
            for w in list(workers):  # exited without closing its channel: a child it forked holds it
                if w in workers and w.proc.poll() is not None:
                    ended(w)
            now = time.monotonic()
            for w in list(workers):
                if w.item is not None and now - w.started >= timeout:
                    elapsed = now - w.started
                    retire(w, kill=True)
                    item, w.item = w.item, None
                    report(item, {"status": "timeout", "wall_s": elapsed,
                                  "detail": f"no result after {timeout:g} s; worker killed"})
                    if pending:
                        spawn()
                elif not w.ready and now - w.spawned >= STARTUP_TIMEOUT_S:
                    retire(w, kill=True)
                    raise Day0Error(f"conformance worker did not start within {STARTUP_TIMEOUT_S:g} s")
    finally:
        for w in list(workers):
            retire(w, kill=True)
        sel.close()
        for name in os.listdir(log_dir):
            try:
                os.remove(os.path.join(log_dir, name))
            except OSError:
                pass
        try:
            os.rmdir(log_dir)
        except OSError:
            pass
    if retry:
        run_items(retry, on_result, jobs=1, timeout=timeout, env=env, _alone=True)


# --------------------------------------------------------------------------------- progress
class Progress:
    """Progress of a run, with a time estimate. On a terminal: a tqdm bar (items done, rate, elapsed
    and remaining time, the counts by status, the item just finished). Elsewhere (a log file, CI):
    a plain line each `every` of the items (10 %) with the same counts, elapsed time and estimate.
    Either way, every item that did not pass gets a line of its own saying why."""

    def __init__(self, total: int, stream: Any = None, tty: bool | None = None, every: float = 0.1,
                 unit: str = "item"):
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.total, self.done = total, 0
        self.counts: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.step = max(1, int(total * every + 0.999999))
        self._bar = None
        if self.tty and total:
            from tqdm import tqdm
            self._bar = tqdm(total=total, file=self.stream, unit=unit, leave=True, mininterval=0.2,
                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}")

    def summary(self) -> str:
        """"pass 12 fail 1" (compile-only: "compiled 12 failed 1"): passing statuses first."""
        order = sorted(self.counts, key=lambda s: (s not in PASSING, s))
        return " ".join(f"{s} {self.counts[s]}" for s in order) or "pass 0"

    def update(self, record: Record) -> None:
        self.done += 1
        self.counts[record.status] = self.counts.get(record.status, 0) + 1
        if not record.passed:
            width = len(str(self.total))
            extra = f"  {record.detail[:160]}" if record.detail else ""
            line = (f"[{self.done:>{width}}/{self.total}] {record.status:<11} "
                    f"{record.kernel}/{record.case}/{record.dtype}"
                    f"{'@' + record.arch if '@' in record.backend else ''} ({record.wall_s:.2f} s){extra}")
            if self._bar is not None:
                self._bar.write(line, file=self.stream)
            else:
                self.stream.write(line + "\n")
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.summary()}  {record.kernel}", refresh=False)
            self._bar.update(1)
        elif self.done % self.step == 0 or self.done == self.total:
            elapsed = time.monotonic() - self.t0
            eta = elapsed / self.done * (self.total - self.done)
            self.stream.write(f"[{self.done}/{self.total}] {100 * self.done // max(1, self.total)}% "
                              f"{self.summary()}; {_fmt_s(elapsed)} elapsed, about {_fmt_s(eta)} left\n")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
