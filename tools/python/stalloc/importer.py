# SPDX-License-Identifier: MIT
"""stalloc-import: PyTorch's own memory records in, stalloc traces out.

    stalloc-import [-o OUT] [--device N] [--free completed|requested]
                   [--iteration-frame REGEX] INPUT
    stalloc-import --compare [--device N] ... INPUT
    stalloc-import --export-snapshot OUT.pickle [--policy P] ... INPUT

INPUT is told from its content (gzip or not):

- a snapshot pickle of ``torch.cuda.memory._dump_snapshot()`` (the files
  PyTorch's memory viewer opens): its ``device_traces`` become the trace,
  blocks live before recording started (freed without having been
  allocated in the trace, or still allocated in ``segments`` at the end)
  become allocations before the first event, and the real allocator's
  reserved peak (from the segment events, or ``segments`` at the end) and
  its ``allocator_settings`` are carried in a ``# torch:`` comment that
  stalloc-replay reads;
- a ``torch.profiler`` chrome trace (``.json`` or ``.json.gz``) recorded
  with ``profile_memory=True``: its ``[memory]`` events of one CUDA device,
  with ``ProfilerStep#N`` spans as iteration markers.

A stalloc trace given where a record is expected is used as it is (for
--compare and --export-snapshot).  Pickles are loaded by an unpickler that
builds plain data only (dicts, lists, tuples, strings, numbers): a pickle
that names any class is refused.  Errors name the file and the event and
exit 1; the output is written to a temporary file renamed at the end, so
a failed import leaves nothing behind.  Documentation/import.rst.
"""

import argparse
import bisect
import gzip
import io
import json
import os
import stat
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import zlib

DEFAULT_ITERATION_FRAME = r"^(step|zero_grad)$"
TRACE_HEADER = "stalloc-trace 1"
POLICIES = ("caching", "expandable", "off", "stalloc")


class ImportFailure(Exception):
    """Bad input: the message names the file and, where known, the event."""


# ------------------------------------------------------------------ loading

class _Refused(pickle.UnpicklingError):
    """A pickle that asks for more than plain data."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, sets, strings, bytes and numbers only."""

    def find_class(self, module, name):
        raise _Refused(
            "the pickle names a class (%s.%s): not a memory snapshot, "
            "refused (only plain data is loaded)" % (module, name))

    def persistent_load(self, pid):
        raise _Refused("the pickle holds a persistent reference: refused")


def _read(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ImportFailure("%s: %s" % (path, e.strerror or e))
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise ImportFailure("%s: bad or truncated gzip data (%s)"
                                % (path, e))
    return raw


def load(path):
    """Return (kind, data): kind is snapshot, profiler or trace."""
    raw = _read(path)
    head = raw[:64].lstrip()
    if raw[:1] == b"\x80":
        try:
            data = _PlainUnpickler(io.BytesIO(raw)).load()
        except _Refused as e:
            raise ImportFailure("%s: %s" % (path, e))
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
                AttributeError, MemoryError, RecursionError) as e:
            raise ImportFailure("%s: not a readable pickle (%s)"
                                % (path, e or type(e).__name__))
        if not isinstance(data, dict) or "device_traces" not in data:
            raise ImportFailure(
                "%s: not a memory snapshot (a pickle without "
                "'device_traces'; record one with "
                "torch.cuda.memory._record_memory_history())" % path)
        return "snapshot", data
    if head[:1] in (b"{", b"["):
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ImportFailure("%s: not valid JSON (%s)" % (path, e))
        if isinstance(data, list):
            data = {"traceEvents": data}
        if not isinstance(data, dict) or \
                not isinstance(data.get("traceEvents"), list):
            raise ImportFailure("%s: JSON without 'traceEvents': not a "
                                "profiler trace" % path)
        return "profiler", data
    first = next((l for l in raw[:4096].split(b"\n")
                  if l.strip() and not l.startswith(b"#")), b"")
    if first.strip() == TRACE_HEADER.encode():
        return "trace", raw
    raise ImportFailure("%s: neither a memory snapshot pickle, a profiler "
                        "trace (.json[.gz]) nor a stalloc trace" % path)


# ------------------------------------------------------------------ traces

class Trace:
    """Events of one device, written as a stalloc trace."""

    def __init__(self, source, fmt, device):
        self.source = source
        self.fmt = fmt
        self.device = device
        self.lines = []
        self.next_id = 0
        self.allocs = self.frees = self.markers = 0
        self.live = self.peak = 0
        self.torch = {}  # the "# torch:" comment
        self.notes = []  # said on stderr
        self.frames = {}  # allocation ID -> stack frames, for export
        self.free_frames = {}  # allocation ID -> its free's frames
        self.pre_existing = 0

    def alloc(self, size, stream, ns=None):
        i = self.next_id
        self.next_id += 1
        keys = " stream=0x%x dev=%d" % (stream, self.device)
        if ns is not None:
            keys += " ns=%d" % ns
        self.lines.append(("a", "%d %d%s" % (i, size, keys)))
        self.allocs += 1
        self.live += size
        if self.live > self.peak:
            self.peak = self.live
        return i

    def free(self, i, size, stream, ns=None):
        keys = " stream=0x%x dev=%d" % (stream, self.device)
        if ns is not None:
            keys += " ns=%d" % ns
        self.lines.append(("f", "%d%s" % (i, keys)))
        self.frees += 1
        self.live -= size

    def mark(self, label):
        self.lines.append(("m", label))
        self.markers += 1

    def text(self):
        out = [TRACE_HEADER,
               "# stalloc-import: source=%s format=%s device=%d"
               % (re.sub(r"\s", "_", os.path.basename(self.source)) or "-",
                  self.fmt, self.device)]
        if self.torch:
            out.append("# torch: " + " ".join(
                "%s=%s" % kv for kv in self.torch.items()))
        for seq, (op, rest) in enumerate(self.lines):
            out.append("%s %d %s" % (op, seq, rest))
        return "\n".join(out) + "\n"


def _int(v, where, what):
    if isinstance(v, bool) or not isinstance(v, int):
        raise ImportFailure("%s: %s is not an integer (%r)"
                            % (where, what, v))
    return v


def _frame_matcher(regex):
    """A predicate on stack frames: does a frame's function match?

    Snapshots share frame dicts between events (pickle's memo), so a
    stack is known by the identities of its frames: each distinct stack
    is searched once.  The record stays alive while this is used.
    """
    pat = re.compile(regex)
    by_name = {}
    by_stack = {}
    by_list = {}  # events may share a frames list too

    def search(frames):
        for fr in frames:
            name = fr.get("name") if isinstance(fr, dict) else None
            hit = by_name.get(name)
            if hit is None:
                hit = by_name[name] = bool(
                    isinstance(name, str) and pat.search(name))
            if hit:
                return True
        return False

    def qualifies(frames):
        if not frames or type(frames) is not list:
            return False
        hit = by_list.get(id(frames))
        if hit is None:
            key = tuple(map(id, frames))
            hit = by_stack.get(key)
            if hit is None:
                hit = by_stack[key] = search(frames)
            by_list[id(frames)] = hit
        return hit
    return qualifies


# ------------------------------------------------------------------ snapshot

SEG_DELTA = {"segment_alloc": 1, "segment_map": 1,
             "segment_free": -1, "segment_unmap": -1}


def _pick_device(traces, device, path):
    used = [d for d, t in enumerate(traces) if t]
    if device is not None:
        if device < 0 or device >= len(traces) or not traces[device]:
            raise ImportFailure(
                "%s: device %d has no events (devices with events: %s)"
                % (path, device, ", ".join(map(str, used)) or "none"))
        return device, used
    if not used:
        raise ImportFailure("%s: no device has events: was "
                            "_record_memory_history() on?" % path)
    return used[0], used


def _settings(data, tr):
    st = data.get("allocator_settings")
    if not isinstance(st, dict):
        return
    if "stalloc_policy" in st:
        tr.notes.append("written by stalloc-import --export-snapshot "
                        "(policy %s): its segments are address ranges, "
                        "not a recorded reserved peak" % st["stalloc_policy"])
        tr.exported = True
        return
    ms = st.get("max_split_size")
    if isinstance(ms, int) and not isinstance(ms, bool) and \
            0 < ms < (1 << 63):
        tr.torch["max_split_size"] = ms
    exp = bool(st.get("expandable_segments", False))
    tr.torch["allocator"] = "expandable" if exp else "caching"
    rp = st.get("roundup_power2_divisions")
    if (isinstance(rp, dict) and any(rp.values())) or \
            (isinstance(rp, int) and rp > 0):
        tr.notes.append("roundup_power2_divisions is set: not modelled by "
                        "stalloc-replay (its caching figure will differ)")
    gc = st.get("garbage_collection_threshold")
    if isinstance(gc, (int, float)) and gc > 0:
        tr.notes.append("garbage_collection_threshold is set: not "
                        "modelled by stalloc-replay")


def _where(path, dev, n):
    return "%s: device_traces[%d][%d]" % (path, dev, n)


def _bad_event(path, dev, n, e):
    """Raise the error that event @n of device @dev deserves."""
    where = _where(path, dev, n)
    if not isinstance(e, dict):
        raise ImportFailure("%s: not a dict" % where)
    act = e.get("action")
    if not isinstance(act, str):
        raise ImportFailure("%s: missing or bad 'action'" % where)
    if act not in ("alloc", "free", "free_requested", "free_completed",
                   "snapshot", "oom", "segment_free_all") and \
            act not in SEG_DELTA:
        raise ImportFailure("%s: unknown action '%s'" % (where, act))
    for k in ("addr", "size"):
        if k not in e:
            raise ImportFailure("%s (%s): missing key '%s'"
                                % (where, act, k))
        _int(e[k], "%s (%s)" % (where, act), k)
    raise ImportFailure("%s (%s): negative size %d"
                        % (where, act, e["size"]))


def import_snapshot(data, path, device=None, free="completed",
                    iteration_frame=DEFAULT_ITERATION_FRAME):
    traces = data.get("device_traces")
    if not isinstance(traces, list):
        raise ImportFailure("%s: 'device_traces' is not a list" % path)
    dev, used = _pick_device(traces, device, path)
    events = traces[dev]
    if not isinstance(events, list):
        raise ImportFailure("%s: device_traces[%d] is not a list"
                            % (path, dev))
    tr = Trace(path, "snapshot", dev)
    if len(used) > 1 and device is None:
        tr.notes.append("devices with events: %s; imported device %d "
                        "(--device to choose)"
                        % (", ".join(map(str, used)), dev))
    segments = data.get("segments")
    if segments is not None and not isinstance(segments, list):
        raise ImportFailure("%s: 'segments' is not a list" % path)
    segments = [s for s in segments or ()
                if isinstance(s, dict) and s.get("device", dev) == dev]
    _settings(data, tr)
    free_action = "free_completed" if free == "completed" else \
        "free_requested"
    skip = "free_requested" if free == "completed" else "free_completed"
    qualifies = _frame_matcher(iteration_frame) if iteration_frame else None

    # Pass 1: check every event; find the blocks live before the first.
    live = {}
    pre = []  # (address, size, stream) freed but never allocated
    unknown = []  # their events' indices, checked against the segments
    seg_ranges = []
    seg_net = 0
    seg_events = 0
    frees = (free_action, "free")
    checked = frees + ("alloc", skip) + tuple(SEG_DELTA)
    for n, e in enumerate(events):
        act = e.get("action") if type(e) is dict else None
        if act in checked:
            addr = e.get("addr")
            size = e.get("size")
            if type(addr) is not int or type(size) is not int or size < 0:
                _bad_event(path, dev, n, e)
        if act == "alloc":
            if not size:
                continue
            if addr in live:
                raise ImportFailure(
                    "%s (alloc): address 0x%x is allocated twice without "
                    "a %s between" % (_where(path, dev, n), addr,
                                      free_action))
            live[addr] = size
        elif act in frees:
            if not size:
                continue
            if live.pop(addr, None) is None:
                pre.append((addr, size, e.get("stream", 0) or 0))
                unknown.append(n)
        elif act in SEG_DELTA:
            seg_net += SEG_DELTA[act] * size
            seg_events += 1
            seg_ranges.append((addr, addr + size))
        elif act in (skip, "snapshot", "oom", "segment_free_all"):
            pass
        else:
            _bad_event(path, dev, n, e)
    # Address ranges the allocator held: a block freed without having
    # been allocated in the trace must lie in one (else it is unknown).
    ranges = []
    for s in segments:
        a, size = s.get("address"), s.get("total_size")
        if isinstance(a, int) and isinstance(size, int):
            ranges.append((a, a + size))
    ranges += seg_ranges
    ranges.sort()
    starts = [r[0] for r in ranges]
    reach = []  # the furthest end among ranges[0..i]
    for r in ranges:
        reach.append(max(r[1], reach[-1]) if reach else r[1])

    def in_segment(addr):
        i = bisect.bisect_right(starts, addr) - 1
        return i >= 0 and reach[i] > addr

    for (addr, _, _), n in zip(pre, unknown):
        if not in_segment(addr):
            raise ImportFailure(
                "%s (%s): free of unknown block 0x%x: not allocated before "
                "in the trace, and in no segment of the snapshot"
                % (_where(path, dev, n), events[n]["action"], addr))
    pre_addrs = set(a for a, _, _ in pre)
    block_frames = {}
    for s in segments:
        for b in s.get("blocks") or ():
            if not isinstance(b, dict):
                continue
            if b.get("state") not in ("active_allocated",
                                      "active_pending_free"):
                continue
            a = b.get("address")
            if a in live or a in pre_addrs:
                continue
            size = b.get("requested_size") or b.get("size")
            if not isinstance(a, int) or not isinstance(size, int) or \
                    size <= 0:
                raise ImportFailure("%s: segments: a block without an "
                                    "integer address and size" % path)
            pre.append((a, size, s.get("stream", 0) or 0))
            pre_addrs.add(a)
            if isinstance(b.get("frames"), list):
                block_frames[a] = b["frames"]

    # The real allocator's reserved bytes.
    if segments and not getattr(tr, "exported", False):
        final = sum(_int(s.get("total_size", 0), path + ": segments",
                         "total_size") for s in segments)
        if seg_events:
            start = final - seg_net
            if start < 0:
                tr.notes.append("segment events free more than the "
                                "segments hold: reserved peak not known")
            else:
                run = peak = start
                for e in events:
                    d = SEG_DELTA.get(e.get("action"))
                    if d:
                        run += d * e["size"]
                        peak = max(peak, run)
                tr.torch["reserved_peak"] = peak
                tr.torch["reserved_source"] = "segment-events"
        else:
            tr.torch["reserved_peak"] = final
            tr.torch["reserved_source"] = "segments-at-end"
        tr.torch["reserved_end"] = final

    # Pass 2: the trace.
    ids = {}
    for a, size, stream in sorted(pre):
        ids[a] = (tr.alloc(size, stream), size)
        if a in block_frames:
            tr.frames[ids[a][0]] = block_frames[a]
    in_run = False
    seg_free_run = False
    alloc, free_, mark = tr.alloc, tr.free, tr.mark
    frames, free_frames = tr.frames, tr.free_frames
    for e in events:
        act = e["action"]
        if act in SEG_DELTA or act == "segment_free_all":
            if act in ("segment_free", "segment_unmap") and \
                    not seg_free_run:
                mark("empty_cache")
                seg_free_run = True
            continue
        if act == "alloc" or act in frees:
            size = e["size"]
            if not size:
                continue
            seg_free_run = False
            fr = e.get("frames")
            if qualifies is not None:
                # a free that carries its allocation's stack (context
                # recorded as "state") says nothing of where it is
                q = qualifies(fr) and (act == "alloc" or (
                    e["addr"] in ids and fr != frames.get(
                        ids[e["addr"]][0])))
                if in_run and not q:
                    mark("iteration")
                in_run = q
            t = e.get("time_us")
            ns = t * 1000 if type(t) is int and t >= 0 else None
            stream = e.get("stream", 0)
            if type(stream) is not int or stream < 0:
                stream = 0
            if act == "alloc":
                i = alloc(size, stream, ns)
                ids[e["addr"]] = (i, size)
                if fr:
                    frames[i] = fr
            else:
                i, size = ids.pop(e["addr"])
                free_(i, size, stream, ns)
                if fr:
                    free_frames[i] = fr
        elif act in ("oom", "snapshot"):
            mark(act)
    if not tr.allocs:
        raise ImportFailure("%s: device %d: no allocation to import"
                            % (path, dev))
    tr.pre_existing = len(pre)
    return tr


# ------------------------------------------------------------------ profiler

def import_profiler(data, path, device=None):
    evs = data["traceEvents"]
    mem = []
    steps = []
    devices = set()
    for n, e in enumerate(evs):
        if not isinstance(e, dict):
            continue
        name = e.get("name")
        if name == "[memory]":
            where = "%s: traceEvents[%d] ([memory])" % (path, n)
            args = e.get("args")
            if not isinstance(args, dict):
                raise ImportFailure("%s: no 'args'" % where)
            if "Bytes" not in args:
                raise ImportFailure("%s: missing 'Bytes'" % where)
            _int(args["Bytes"], where, "Bytes")
            dtype = args.get("Device Type")
            did = args.get("Device Id")
            if dtype == 0 or not isinstance(did, int) or did < 0:
                continue  # CPU memory
            devices.add(did)
            ts = e.get("ts")
            if not isinstance(ts, (int, float)):
                raise ImportFailure("%s: missing or bad 'ts'" % where)
            mem.append((ts, n, did, args))
        elif isinstance(name, str) and name.startswith("ProfilerStep#"):
            ts = e.get("ts")
            if isinstance(ts, (int, float)):
                steps.append(ts)
    if not devices:
        raise ImportFailure("%s: no [memory] event of a CUDA device: was "
                            "the profiler run with profile_memory=True?"
                            % path)
    if device is None:
        dev = min(devices)
    elif device not in devices:
        raise ImportFailure("%s: device %d has no [memory] event "
                            "(devices: %s)" % (path, device, ", ".join(
                                map(str, sorted(devices)))))
    else:
        dev = device
    tr = Trace(path, "profiler", dev)
    if len(devices) > 1 and device is None:
        tr.notes.append("devices with events: %s; imported device %d "
                        "(--device to choose)"
                        % (", ".join(map(str, sorted(devices))), dev))
    mem = sorted((m for m in mem if m[2] == dev), key=lambda m: m[:2])
    steps.sort()

    # Pass 1: pair the frees, find what was live before the window.
    def key_of(args):
        a = args.get("Addr")
        return a if isinstance(a, int) and a else None

    live_addr = {}
    live_size = {}
    pre = []  # sizes freed without an allocation in the window
    first_unknown = None
    first_total = None
    net = 0  # bytes of the window's events so far
    for ts, n, _, args in mem:
        b = args["Bytes"]
        a = key_of(args)
        net += b
        if first_total is None and isinstance(
                args.get("Total Allocated"), int):
            first_total = (args["Total Allocated"], net)
        if b > 0:
            if a is not None:
                live_addr[a] = b
            else:
                live_size[b] = live_size.get(b, 0) + 1
        elif b < 0:
            if a is not None and live_addr.pop(a, None) is not None:
                continue
            if a is None and live_size.get(-b):
                live_size[-b] -= 1
                continue
            pre.append(-b)
            if first_unknown is None:
                first_unknown = n
    # Live before the window: Total Allocated at the first event that
    # gives it, less the window's bytes up to there; the blocks freed in
    # the window without an allocation in it are part of that.
    extra = 0
    if first_total is not None:
        total, net = first_total
        extra = total - net - sum(pre)
        if extra < 0:
            raise ImportFailure(
                "%s: traceEvents[%d] ([memory]): free of unknown block: "
                "the window frees %d bytes it never allocated, but Total "
                "Allocated says %d were live before it"
                % (path, first_unknown, sum(pre), total - net))
    elif pre:
        tr.notes.append("%d frees without an allocation in the window "
                        "(first: traceEvents[%d]) and no Total Allocated: "
                        "taken as blocks live before the window"
                        % (len(pre), first_unknown))
    # Pass 2: the trace.
    pre_ids = {}
    if extra:
        tr.alloc(extra, 0)
    for s in pre:
        pre_ids.setdefault(s, []).append(tr.alloc(s, 0))
    by_addr = {}
    by_size = {}
    agree = given = 0
    first_bad = None
    si = 0
    for ts, n, _, args in mem:
        while si < len(steps) and steps[si] <= ts:
            tr.mark("iteration")
            si += 1
        b = args["Bytes"]
        a = key_of(args)
        ns = int(ts * 1000)
        if b > 0:
            i = tr.alloc(b, 0, ns)
            if a is not None:
                by_addr[a] = (i, b)
            else:
                by_size.setdefault(b, []).append(i)
        elif b < 0:
            i, size = by_addr.pop(a, (None, -b)) if a is not None else \
                (None, -b)
            if i is None and a is None and by_size.get(-b):
                i = by_size[-b].pop()  # the latest of that size
            if i is None:
                i = pre_ids[-b].pop()
            tr.free(i, size, 0, ns)
        t = args.get("Total Allocated")
        if isinstance(t, int) and not isinstance(t, bool):
            given += 1
            if t == tr.live:
                agree += 1
            elif first_bad is None:
                first_bad = (n, t, tr.live)
        r = args.get("Total Reserved")
        if isinstance(r, int) and r > tr.torch.get("reserved_peak", -1):
            tr.torch["reserved_peak"] = r
            tr.torch["reserved_source"] = "profiler-total-reserved"
    if not tr.allocs:
        raise ImportFailure("%s: device %d: no allocation to import"
                            % (path, dev))
    tr.total_allocated = (agree, given, first_bad)
    tr.pre_existing = len(pre) + (1 if extra else 0)
    return tr


# ------------------------------------------------------------------ output

def write_atomic(path, text, mode="w"):
    """Write beside @path and rename over it, so that no reader sees half
    a file -- unless @path is something else than a regular file (a device
    such as /dev/null, a FIFO, a symbolic link): a rename would replace it,
    so it is written into instead."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, mode) as f:
            f.write(text)
        return
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".stalloc-import-")
    try:
        with os.fdopen(fd, mode) as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def import_file(path, device=None, free="completed",
                iteration_frame=DEFAULT_ITERATION_FRAME):
    """Import one record; return a Trace (or the text of a stalloc trace)."""
    kind, data = load(path)
    if kind == "snapshot":
        return import_snapshot(data, path, device, free, iteration_frame)
    if kind == "profiler":
        return import_profiler(data, path, device)
    return data.decode("utf-8", "replace")


def summary(tr):
    gib = tr.peak / (1 << 30)
    s = ("%s: %s, device %d: %d allocations (%d from before recording), "
         "%d frees, %d markers, peak live %d B (%.3f GiB)"
         % (tr.source, tr.fmt, tr.device, tr.allocs, tr.pre_existing,
            tr.frees, tr.markers, tr.peak, gib))
    if "reserved_peak" in tr.torch:
        s += "; torch reserved peak %d B (%.3f GiB, %s)" % (
            tr.torch["reserved_peak"], tr.torch["reserved_peak"] / (1 << 30),
            tr.torch["reserved_source"])
    if tr.fmt == "profiler":
        agree, given, bad = tr.total_allocated
        if given:
            s += "; Total Allocated: %d of %d events agree" % (agree, given)
            if bad:
                s += " (first differing: traceEvents[%d], %d recorded, " \
                     "%d imported)" % bad
        else:
            s += "; no event carries Total Allocated"
    return s


# ------------------------------------------------------------------ replay

def find_replay():
    env = os.environ.get("STALLOC_REPLAY")
    if env:
        return env
    here = os.path.dirname(os.path.realpath(sys.argv[0] or "."))
    cand = os.path.join(here, "stalloc-replay")
    if os.access(cand, os.X_OK):
        return cand
    found = shutil.which("stalloc-replay")
    if found:
        return found
    raise ImportFailure("stalloc-replay not found (set STALLOC_REPLAY, or "
                        "put it in PATH)")


def replay(trace_path, policy, addr_log=None, seg_log=None):
    cmd = [find_replay(), "--json", "--policy", policy]
    if addr_log:
        cmd += ["--addr-log", addr_log]
    if seg_log:
        cmd += ["--segment-log", seg_log]
    p = subprocess.run(cmd + [trace_path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise ImportFailure("stalloc-replay --policy %s %s failed (exit "
                            "%d): %s" % (policy, trace_path, p.returncode,
                                         p.stderr.strip()))
    return json.loads(p.stdout)


def _gib(b):
    return b / (1 << 30)


def compare(trace_path, label, out=sys.stdout):
    res = {p: replay(trace_path, p) for p in POLICIES}
    base = res["caching"]["peak_reserved_bytes"]
    print("%s" % label, file=out)
    print("%-11s %14s %14s %8s %14s" % ("policy", "requested GiB",
                                        "reserved GiB", "frag",
                                        "vs caching GiB"), file=out)
    for p in POLICIES:
        r = res[p]
        print("%-11s %14.3f %14.3f %8.4f %+14.3f"
              % (p, _gib(r["peak_requested_bytes"]),
                 _gib(r["peak_reserved_bytes"]), r["fragmentation"],
                 _gib(base - r["peak_reserved_bytes"])), file=out)
    print("vs caching: the caching model's reserved peak minus the "
          "policy's (positive: memory saved)", file=out)
    torch_peak = res["caching"].get("torch_reserved_peak_bytes")
    if torch_peak:
        st = res["stalloc"]["peak_reserved_bytes"]
        alloc = res["caching"].get("torch_allocator", "caching")
        print("recorded:   PyTorch (%s) reserved %.3f GiB at its peak; "
              "the %s model %+.2f%% of that; stalloc %.3f GiB less "
              "(%.1f%%)"
              % (alloc, _gib(torch_peak), alloc,
                 100.0 * (res[alloc]["peak_reserved_bytes"] / torch_peak
                          - 1), _gib(torch_peak - st),
                 100.0 * (torch_peak - st) / torch_peak), file=out)
    return res


def _outside(extents, held):
    """The parts of sorted @extents outside the sorted disjoint @held."""
    out = []
    j = 0
    for s, e in extents:
        while j < len(held) and held[j][1] <= s:
            j += 1
        k = j
        while s < e and k < len(held) and held[k][0] < e:
            if held[k][0] > s:
                out.append((s, held[k][0]))
            s = max(s, held[k][1])
            k += 1
        if s < e:
            out.append((s, e))
    return out


def _trace_id(s):
    return int(s, 16) if s[:2] in ("0x", "0X") else int(s)


def export_snapshot(trace_text, policy, out_path, frames=None,
                    free_frames=None):
    """Replay under @policy; write PyTorch's snapshot layout.

    @frames maps allocation IDs to the stack frames the record gave them
    (an imported snapshot), so the viewer shows where each block came
    from.  Segments: the models' own at the end of the replay (caching,
    expandable), and for what lies outside them (libstalloc's policies;
    memory the models gave back) the address ranges the replay handed out,
    merged where they touch.  Every block lies in one; blocks tile them.
    """
    frames = frames or {}
    free_frames = free_frames or {}
    with tempfile.TemporaryDirectory(prefix="stalloc-export-") as d:
        tpath = os.path.join(d, "in.trace")
        lpath = os.path.join(d, "addr.log")
        with open(tpath, "w") as f:
            f.write(trace_text)
        spath = os.path.join(d, "segments.log")
        models = policy in ("caching", "expandable")
        res = replay(tpath, policy, lpath, spath if models else None)
        with open(lpath) as f:
            log = [l.split() for l in f]
        held = []
        if models:
            with open(spath) as f:
                held = sorted((int(b, 16), int(b, 16) + int(n))
                              for b, n in (l.split() for l in f))
    dev = 0
    trace = []
    live = {}
    extents = []  # [start, end) of every block handed out
    k = 0
    for line in trace_text.splitlines():
        f = line.split()
        if not f or f[0] not in ("a", "f"):
            continue
        keys = dict(x.split("=", 1) for x in f[3 if f[0] == "f" else 4:]
                    if "=" in x)
        stream = int(keys.get("stream", "0"), 16)
        dev = int(keys.get("dev", "0"))
        ns = int(keys.get("ns", "0"))
        if f[0] == "a":
            lid, addr, size = log[k]
            k += 1
            if addr == "-":
                continue
            addr, size = int(addr, 16), int(size)
            fr = frames.get(_trace_id(f[2]), [])
            live[f[2]] = (addr, size, stream, fr)
            extents.append((addr, addr + size))
            trace.append({"action": "alloc", "addr": addr, "size": size,
                          "stream": stream, "time_us": ns // 1000,
                          "frames": fr})
        else:
            b = live.pop(f[2], None)
            if b is None:
                continue
            fr = free_frames.get(_trace_id(f[2]), b[3])
            for act in ("free_requested", "free_completed"):
                trace.append({"action": act, "addr": b[0], "size": b[1],
                              "stream": stream, "time_us": ns // 1000,
                              "frames": fr})
    # Segments: what the model holds, then the ranges handed out that lie
    # outside it, merged.
    extents.sort()
    merged = []
    for s, e in _outside(extents, held):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    merged = sorted([list(h) for h in held] + merged)
    ends = sorted(live.values(), key=lambda b: b[0])
    segments = []
    j = 0
    for s, e in merged:
        blocks = []
        pos = s
        alloc = 0
        stream = 0
        while j < len(ends) and ends[j][0] < e:
            a, size, stream, fr = ends[j]
            if a > pos:
                blocks.append({"address": pos, "size": a - pos,
                               "requested_size": 0, "state": "inactive",
                               "frames": []})
            blocks.append({"address": a, "size": size,
                           "requested_size": size,
                           "state": "active_allocated", "frames": fr})
            alloc += size
            pos = max(pos, a + size)
            j += 1
        if pos < e:
            blocks.append({"address": pos, "size": e - pos,
                           "requested_size": 0, "state": "inactive",
                           "frames": []})
        segments.append({"device": dev, "address": s, "total_size": e - s,
                         "allocated_size": alloc, "active_size": alloc,
                         "requested_size": alloc, "stream": stream,
                         "segment_type": "large" if e - s > (1 << 20)
                         else "small", "segment_pool_id": (0, 0),
                         "is_expandable": policy == "expandable",
                         "frames": [], "blocks": blocks})
    traces = [[] for _ in range(dev + 1)]
    traces[dev] = trace
    snap = {"segments": segments, "device_traces": traces,
            "allocator_settings": {"stalloc_policy": policy},
            "external_annotations": []}
    write_atomic(out_path, pickle.dumps(snap, protocol=4), "wb")
    return res, snap


# ------------------------------------------------------------------ main

def _parser():
    p = argparse.ArgumentParser(
        prog="stalloc-import",
        description="Convert PyTorch memory records (snapshot pickles of "
        "torch.cuda.memory._dump_snapshot(), torch.profiler chrome traces "
        "with [memory] events) into a stalloc trace; compare the "
        "allocators on them; export a replay to PyTorch's memory viewer.",
        epilog="Exit status: 0 done, 1 bad input or a failed replay, "
        "2 usage.  Documentation/import.rst.")
    p.add_argument("input", metavar="INPUT",
                   help="snapshot pickle, profiler trace (.json[.gz]), or "
                   "(for --compare/--export-snapshot) a stalloc trace")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="the trace to write (default: standard output)")
    p.add_argument("--device", type=int, metavar="N",
                   help="the device to import (default: the first with "
                   "events)")
    p.add_argument("--free", choices=("completed", "requested"),
                   default="completed",
                   help="snapshots: free a block at free_completed (what "
                   "the allocator sees; default) or free_requested")
    p.add_argument("--iteration-frame", metavar="REGEX",
                   default=DEFAULT_ITERATION_FRAME,
                   help="snapshots: a stack frame whose function name "
                   "matches REGEX is the optimizer; an iteration marker "
                   "goes where its events end (default %(default)s; "
                   "'' for no markers)")
    p.add_argument("--compare", action="store_true",
                   help="replay under caching, expandable, off and "
                   "stalloc and print peak requested and reserved")
    p.add_argument("--export-snapshot", metavar="PICKLE",
                   help="replay under --policy and write the result as a "
                   "snapshot pickle for PyTorch's memory viewer")
    p.add_argument("--policy", choices=POLICIES, default="stalloc",
                   help="the policy --export-snapshot replays "
                   "(default %(default)s)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no summary on standard error")
    return p


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.iteration_frame:
        try:
            re.compile(args.iteration_frame)
        except re.error as e:
            parser.error("bad --iteration-frame %r: %s"
                         % (args.iteration_frame, e))
    try:
        tr = import_file(args.input, args.device, args.free,
                         args.iteration_frame or None)
        text = tr if isinstance(tr, str) else tr.text()
        if not isinstance(tr, str) and not args.quiet:
            for n in tr.notes:
                print("stalloc-import: %s: %s" % (args.input, n),
                      file=sys.stderr)
            print("stalloc-import: " + summary(tr), file=sys.stderr)
        if args.output:
            write_atomic(args.output, text)
        if args.compare or args.export_snapshot:
            with tempfile.TemporaryDirectory(prefix="stalloc-import-") as d:
                tpath = os.path.join(d, "imported.trace")
                with open(tpath, "w") as f:
                    f.write(text)
                if args.compare:
                    compare(tpath, args.input)
                if args.export_snapshot:
                    res, snap = export_snapshot(
                        text, args.policy, args.export_snapshot,
                        None if isinstance(tr, str) else tr.frames,
                        None if isinstance(tr, str) else tr.free_frames)
                    if not args.quiet:
                        print("stalloc-import: %s: %s replay written, %d "
                              "events, %d segments, peak reserved %.3f GiB"
                              % (args.export_snapshot, args.policy,
                                 len(snap["device_traces"][-1]),
                                 len(snap["segments"]),
                                 _gib(res["peak_reserved_bytes"])),
                              file=sys.stderr)
        elif not args.output:
            sys.stdout.write(text)
    except ImportFailure as e:
        print("stalloc-import: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("stalloc-import: %s: %s" % (getattr(e, "filename", None) or
                                          args.output or args.input,
                                          e.strerror or e), file=sys.stderr)
        return 1
    except BrokenPipeError:
        # a reader that stopped early (| head): no traceback at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
