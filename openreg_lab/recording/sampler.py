"""The sampling thread behind host time: while a trace is open (``trace(host=True)``, the default),
one thread per process (parked between traces) samples every Python thread's stack every 1 to 16 ms
(Note [The sampler's budget]) and reads how long the thread ran on a CPU since the last sample
(Note [Host samples]). ``Sampler.stop_raw`` hands its rows to ``host.resolve``, which makes them
the ``host.Samples`` a trace keeps."""

from __future__ import annotations

import _thread
import os
import threading
import time
from types import CodeType

from openreg_lab import _C
from openreg_lab.recording.host import INTERVAL_NS, Samples, resolve

#: The longest time between two samples, in ns.
MAX_INTERVAL_NS = 16_000_000
#: The interval a sampler starts with is its process's last one's, halved once for each
#: CARRIED_HALF_LIFE_NS since that was set (Note [The sampler's budget]).
CARRIED_HALF_LIFE_NS = 1_000_000_000
#: The share of the process's CPU time the sampler's thread may take (each sample costs the
#: sampled thread about as much again: Note [The sampler's budget]).
BUDGET = 0.01
#: Samples between two checks of the budget.
ADAPT_EVERY = 8
#: The share of a sample interval a thread may spend off a CPU and still be taken as running
#: through it (the gap then counts as run-queue time: Note [The sampler's budget]).
RUNNING_SLACK = 0.02

# Note [The sampler's budget]
# Samples are taken per wall-clock interval, the work they observe is CPU time: on a busy machine
# (or a process that mostly waits) a fixed rate would cost a larger share of what the process
# does. Every ADAPT_EVERY samples the sampler compares its own CPU time with the whole process's
# and scales its interval by its share over BUDGET (at most 4x longer or 2x shorter a check, not
# for a share within 20% of the budget; between INTERVAL_NS and MAX_INTERVAL_NS), never longer
# while the process mostly idled (its threads together used less than half a CPU: a sleeping
# loader costs no one its samples, and the Python after it is sampled finely). The process, not the
# sampled threads: a process whose Python thread is off the CPU while its other threads (torch's
# pools, openreg's) keep the CPUs busy is not idle. Until later measurements the rule
# read the sampled threads, and in the small-op step (the main thread on a CPU a quarter to a half
# of the time, the process using 1-1.6 CPUs) it held the interval under the budget's, the sampler
# at 3.3% of the CPU in its own thread (1.6% since). BUDGET counts
# the sampler's own CPU time only; each sample also costs the thread it
# samples about as much (it gives up the GIL and takes it back: two context switches and cold
# caches), so 1% of the sampler's own is about 2-3% of the step (benchmarks/bench_trace.py host;
# at 2% the sampler alone cost 4-5% of the small-op training step).
# The interval a sampler ends with is where the process's next one starts (``_carried``), halved
# for each CARRIED_HALF_LIFE_NS since it was set: traces opened one after another (a loop that
# traces every few steps, the benchmark) keep the rate the budget chose, while a trace opened
# seconds after the last one (a notebook's next cell) starts fine again, its budget unspent. A
# sampler that ends between two checks still sets it from its last samples (two at least), for a
# trace around a few steps ends before 8 samples would bring a 1 ms start within the budget, and a
# process that opens one trace after another would pay the start each time (we measured the
# sampler alone at 1.2x the small-op training step that way). The carried interval was capped at
# 6 ms until later measurements: a sample costs the sampling thread 0.2-0.25 ms of CPU on
# the 2-core machine (woken, the GIL taken, cold caches; the sampled thread pays about 0.07 ms
# more), so the cap held the sampler at about 4% of the small-op step, over BUDGET by design. The
# budget decides now: a short trace in a busy process may get a sample or two, and the verdict
# says how much of it was not sampled.
# A thread whose CPU clock and run-queue time have not moved since its last sample has the same
# stack: it is recorded without reading or walking its frames, so threads that wait (a notebook's
# kernel threads, a loader blocked on a queue) cost one read each. A thread whose CPU clock
# advanced by all but RUNNING_SLACK of the interval ran through it: the gap counts as run-queue
# time whatever its schedstat says (which lags a thread still in the queue when it is read), so
# such an interval never reads as waiting (Note [Host samples]).
_carried = [INTERVAL_NS, 0]  # the interval the process's last sampler ended with, and when (ns)


def _start_interval(now: int) -> int:
    """The interval a new sampler starts with: the last one's, halved for each CARRIED_HALF_LIFE_NS
    since it was set (Note [The sampler's budget])."""
    interval, since = _carried
    return interval >> min(max(now - since, 0) // CARRIED_HALF_LIFE_NS, 16)


# Note [Host samples]
# A sampling thread, not a tracing hook: its cost is bounded by the interval whatever the script
# does (a profile hook such as pyinstrument's or torch.profiler's Python tracer runs on every call,
# which in a training step of small ops is tens of thousands of calls; benchmarks/bench_trace.py
# measures them side by side). Each sample reads the stacks of the threads that ran since their last
# sample in one C++ call that keeps the GIL from sys._current_frames() to the last frame
# (csrc/python/HostStacks.cpp: a walk in Python could lose the GIL halfway, and reading a frame its
# thread had since left crashed CPython 3.11 once in the suite). Each stack, innermost frame first,
# is read, and added to a prefix tree of (code, instruction) nodes, only until a frame of the
# thread's last sample at the same instruction: a frame still running is the same object, and its
# callers have not moved. Frames are known by id() and instruction, and none is kept between
# samples (a kept frame would keep its locals, tensors included, alive); an id reused by a new frame
# of the same code at the same instruction could borrow the old callers, a rare and bounded error we
# accept for adding a few frames a sample instead of fifty.
# Lines, qualified names and the callee of a waiting line are read once per node when the trace
# ends. Beside the stack, the sampler reads the thread's CPU clock and its schedstat's time waiting
# in the run queue: the time between two samples that the thread spent neither running nor
# runnable is time it waited (a sleep, a lock, I/O, a queue), measured by the kernel, not guessed
# from names. Where /proc has no schedstat, run-queue time counts as waiting. schedstat counts a
# wait in the run queue when it ends: a thread queued at a sample has that wait in its next
# interval, so what an interval's ran+queued time exceeds its length by goes back to the one
# before (on a loaded machine a busy thread read a fifth of its time as waiting without it).
# The rate adapts to a budget (Note [The sampler's budget]).


# Note [One sampling thread, parked between traces]
# Starting a thread per trace cost a trace around 5 small-op training steps about 13% of its CPU
# time (benchmarks/bench_trace.py sampler, "host sampler alone"; a sampler left running over the
# same steps, 1-3%): the new thread's start and end each take the GIL from the busy thread,
# besides the thread's own creation. So the process keeps one bare sampling thread (not a
# threading.Thread: nothing joins it at exit, and threading.enumerate() does not list it). Between
# traces it waits on a lock without the GIL; a trace's sampler is handed to it when it is free, or
# when the sampler it runs has been stopped and it only has to notice (stop_raw wakes it): then it
# takes the next at once. Two traces open at once (in two threads, or nested) are not serialised:
# the second gets a thread of its own, which ends with it. After fork the child starts its own
# parked thread on first use.
class _Parked:
    """The process's parked sampling thread: the samplers handed to it, one at a time."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = _thread.allocate_lock()  # guards current and queued
        self.go = _thread.allocate_lock()  # released to hand it a sampler
        self.go.acquire()
        self.current: Sampler | None = None
        self.queued: Sampler | None = None
        self.dead = False  # a sampler raised: the thread ended (its traceback printed)
        #: Per OS thread its clock id and schedstat fd, kept across traces (Note [Clock reads keep
        #: the GIL]); only this thread touches it.
        self.handles: dict[int, tuple[int | None, int | None]] = {}
        _thread.start_new_thread(self._loop, ())

    def take(self, sampler: Sampler) -> bool:
        """Hand ``sampler`` to the thread; False when it is busy with a running one, or ended."""
        with self.lock:
            if self.dead or self.queued is not None:
                return False
            if self.current is not None and not self.current._stopping:
                return False
            if self.current is None:
                self.current = sampler
                self.go.release()
            else:
                self.queued = sampler  # taken when the stopped one returns
            return True

    def _loop(self) -> None:
        while True:
            self.go.acquire()  # parked, without the GIL
            while True:
                sampler = self.current
                if sampler is None:
                    break
                try:
                    sampler._run(self.handles)
                except BaseException:
                    with self.lock:  # a sampler's fault ends this thread, as it did its own
                        self.dead, queued = True, self.queued
                    if queued is not None:
                        _thread.start_new_thread(queued._run, ())
                    raise
                with self.lock:
                    self.current, self.queued = self.queued, None


_parked: list[_Parked] = []  # the process's parked thread, once started


def _thread_for(sampler: Sampler) -> None:
    """Run ``sampler`` on the parked thread (Note [One sampling thread, parked between traces])."""
    if not _parked or _parked[0].pid != os.getpid() or _parked[0].dead:
        if _parked and _parked[0].pid != os.getpid():
            for h in _parked[0].handles.values():  # a forked child's copies of the parent's fds
                _close(h)
        _parked[:] = [_Parked()]
    if not _parked[0].take(sampler):
        _thread.start_new_thread(sampler._run, ())


class Sampler:
    """Samples every Python thread but its own until ``stop()`` (Note [Host samples])."""

    def __init__(self, interval_ns: int = INTERVAL_NS) -> None:
        self.interval_ns = interval_ns
        self._stopping = False
        #: The CPU time (ns) its thread spent on this sampler, set when it returns (woken by
        #: ``stop_raw``); -1 until then. For benchmarks/bench_trace.py's share of the budget.
        self.own_cpu_ns = -1
        self._rows: list[tuple[int, int, int, int, int]] = []
        self._nodes: dict[tuple[int, int, int], int] = {}
        self._node_list: list[tuple[int, CodeType, int]] = []
        self._last: dict[int, tuple[list[tuple[int, int, int]], dict[tuple[int, int], int]]] = {}
        # OS thread id -> (its CPU clock id, its schedstat file), None where there is none
        self._stat: dict[int, tuple[int | None, int | None]] = {}
        # OS thread id -> (cpu, queue, node, time) when last seen
        self._ran: dict[int, tuple[int, int, int, int]] = {}
        self._wake = _thread.allocate_lock()  # held while sampling; released by stop_raw
        self._wake.acquire()

    def start(self) -> None:
        """Start sampling, on the process's parked sampling thread when it is free (Note [One
        sampling thread, parked between traces]), else on a thread of its own."""
        _thread_for(self)

    def stop(self) -> Samples:
        """Stop sampling and return the samples taken so far (its thread is woken to return)."""
        return resolve(self.stop_raw())

    def stop_raw(self) -> tuple[list[tuple[int, int, int, int, int]], list[tuple[int, CodeType, int]], int]:
        """Stop sampling; the rows and nodes as taken, for ``resolve`` to name when first read."""
        self._stopping = True
        if self._wake.locked():
            self._wake.release()  # its thread returns at its next hold of the GIL, not a sleep later
        rows = list(self._rows)  # the rows first: a node of a row is in the node list by then
        return rows, list(self._node_list), self.interval_ns

    def _run(self, keep: dict[int, tuple[int | None, int | None]] | None = None) -> None:
        """Sample until stopped. ``keep``: the clock ids and schedstat fds per OS thread that
        outlive this sampler (the parked thread's, Note [Clock reads keep the GIL]); None: its own,
        closed when it returns."""
        if keep is not None:
            self._stat = keep
        me = threading.get_ident()
        interval = max(self.interval_ns, _start_interval(time.monotonic_ns()))  # Note [The sampler's budget]
        cpu0 = time.thread_time_ns()
        window = (cpu0, time.process_time_ns(), time.monotonic_ns())
        n = 0
        try:
            while not self._stopping:
                # A lock's timed acquire, not an Event: waking takes the GIL once (an Event's wait
                # takes it several times, each up to the switch interval while another thread runs
                # Python), like time.sleep, and stop_raw() can end the wait at once.
                self._pause(interval / 1e9)
                if self._stopping:
                    return
                self._sample(me)
                n += 1
                if n % ADAPT_EVERY == 0:  # Note [The sampler's budget]
                    interval, window = self._adapt(interval, window)
                    _carried[:] = [interval, time.monotonic_ns()]
        finally:
            if n % ADAPT_EVERY >= 2:  # a short trace: its samples still set the next one's start
                interval = self._adapt(interval, window)[0]
            _carried[:] = [interval, time.monotonic_ns()]
            self.own_cpu_ns = time.thread_time_ns() - cpu0
            if keep is None:
                for h in self._stat.values():
                    _close(h)
            else:  # the parked thread's: kept for the next trace, but for ended threads'
                alive = {getattr(t, "native_id", None) for t in list(threading._active.values())}  # type: ignore[attr-defined]
                for tid in [tid for tid in keep if tid not in alive]:
                    _close(keep.pop(tid))

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` between two samples, or until ``stop_raw``."""
        self._wake.acquire(timeout=seconds)

    def _adapt(self, interval: int, window: tuple[int, int, int]) -> tuple[int, tuple[int, int, int]]:
        """The next interval, from this thread's share of the process's CPU time since ``window``
        (thread CPU, process CPU, wall), and the next window (Note [The sampler's budget])."""
        cpu0, process0, wall0 = window
        cpu, process, wall = time.thread_time_ns(), time.process_time_ns(), time.monotonic_ns()
        share = (cpu - cpu0) / max(process - process0, 1)
        factor = min(max(share / BUDGET, 0.5), 4.0)
        if (process - process0) * 2 < wall - wall0:
            factor = min(factor, 1.0)  # the process mostly idled: no one paid
        if not 0.8 < factor < 1.25:
            interval = min(max(int(interval * factor), self.interval_ns), MAX_INTERVAL_NS)
        return interval, (cpu, process, wall)

    def _sample(self, me: int) -> None:
        active = threading._active  # type: ignore[attr-defined]  # ident -> Thread, read-only here
        ran = self._ran
        read = []  # (ident, tid, now, cpu, queue, node or None: its stack is to be read)
        for ident, t in list(active.items()):
            if ident == me:
                continue
            tid = getattr(t, "native_id", None)
            if tid is None:
                continue
            last = ran.get(tid)
            now, cpu, queue = self._times(ident, tid, last)
            if last is not None and last[0] == cpu and last[1] == queue and cpu >= 0:
                read.append((ident, tid, now, cpu, queue, last[2]))  # not run since: same stack
            else:
                read.append((ident, tid, now, cpu, queue, None))
        # The stacks of the threads that ran, in one call (Note [Host samples]).
        seen = self._last  # ident -> (path, (frame id, instruction) -> depth) of its last sample
        walk = [(r[0], seen[r[0]][1] if r[0] in seen else {}) for r in read if r[5] is None]
        stacks = _C._host_thread_stacks(walk) if walk else {}
        for ident, tid, now, cpu, queue, node in read:
            if node is None:
                stack = stacks.get(ident)
                if stack is None:
                    continue  # it has no Python frame (ending, or not started)
                node = self._node_of(ident, *stack)
            ran[tid] = (cpu, queue, node, now)
            self._rows.append((now, tid, node, cpu, queue))

    def _node_of(self, ident: int, fresh: list[tuple[int, int, CodeType]], base: int) -> int:
        """The node of a thread's stack, from the frames that changed since the thread's last sample
        (innermost first: id of the frame, last instruction, code) and the depth in that sample of
        the frame they were called from (-1: none), as _C._host_thread_stacks reads them (Note [Host
        samples]): a frame still running is the same object, at the same instruction if it has not
        moved, and so are its callers."""
        prev = self._last.get(ident)
        if prev is None:
            prev = self._last[ident] = ([], {})
        path, index = prev  # (id(frame), lasti, node) root first; (id(frame), lasti) -> depth
        for gone in path[base + 1 :]:
            index.pop((gone[0], gone[1]), None)
        del path[base + 1 :]
        node = path[-1][2] if path else -1
        nodes = self._nodes
        for frame_id, lasti, code in reversed(fresh):
            k = (node, id(code), lasti)
            n = nodes.get(k)
            if n is None:
                n = len(self._node_list)
                nodes[k] = n
                self._node_list.append((node, code, lasti))  # keeps the code (and its id) alive
            node = n
            index[(frame_id, lasti)] = len(path)
            path.append((frame_id, lasti, node))
        return node

    def _times(self, ident: int, tid: int, last: tuple[int, int, int, int] | None) -> tuple[int, int, int]:
        """When the thread's clocks were read (monotonic ns), its ns on a CPU (its CPU clock: exact,
        while schedstat's count lags a running thread by up to a scheduler tick) and its ns waiting
        in the run queue (schedstat; 0 without), read in one call that keeps the GIL (Note [Clock
        reads keep the GIL]). A thread that ran through all but RUNNING_SLACK of the time since
        ``last`` gets the gap as run-queue time, whatever schedstat says (Note [The sampler's
        budget])."""
        h = self._stat.get(tid)
        if h is None:
            h = self._stat[tid] = _handles(ident, tid)
        clock, fd = h
        now, cpu, queue = _C._host_thread_times(
            NO_CLOCK if clock is None else clock, -1 if fd is None else fd
        )
        if cpu < 0 or (fd is not None and queue < 0):
            if clock is not None:  # the thread ended (its id may come back: opened afresh)
                _close(self._stat.pop(tid))
            return now, -1, -1  # its time counts as running
        if last is not None and last[0] >= 0:
            gap = (now - last[3]) - (cpu - last[0])
            if gap <= RUNNING_SLACK * (now - last[3]):
                return now, cpu, last[1] + max(gap, 0)
        if fd is None:
            queue = 0
        if last is not None and last[1] > queue:
            queue = last[1]  # never below a gap taken as run-queue time: the count only grows
        return now, cpu, queue


# Note [Clock reads keep the GIL]
# A sample reads each thread's CPU clock and schedstat through _C._host_thread_times, which holds
# the GIL through both (a /proc read of three numbers never blocks). os.pread would give the GIL
# up: the sampled thread takes it, and the sampler waits up to the switch interval (5 ms) to get it
# back. That cost the sampled thread two more switches per read, and stretched a sample over
# milliseconds, so the time it was stamped with was no longer the time its clocks were read: a busy
# thread read as having waited that long (tests/recording/test_trace_host.py,
# test_a_thread_that_runs_through_its_intervals_never_reads_as_waiting, failed so in a full run).
# Each thread's reads now carry their own time. The clock ids and schedstat files are opened once
# per thread and kept by the parked sampling thread across traces (closed when their thread ends).
NO_CLOCK = 0x7FFFFFFF  # a clock id no thread has: its read fails, as a missing clock's should


def _handles(ident: int, tid: int) -> tuple[int | None, int | None]:
    """A thread's CPU clock id and an open fd on its schedstat (None where there is none)."""
    try:
        clock: int | None = time.pthread_getcpuclockid(ident)
    except (OSError, AttributeError):
        clock = None
    try:
        fd: int | None = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
    except OSError:
        fd = None
    return clock, fd


def _close(handles: tuple[int | None, int | None]) -> None:
    if handles[1] is not None:
        os.close(handles[1])
