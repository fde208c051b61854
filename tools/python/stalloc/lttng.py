# SPDX-License-Identifier: MIT
"""stalloc-lttng (stalloc.lttng): record stalloc's lttng-ust events, convert them to traces.

  stalloc-lttng record [-o DIR] -- COMMAND [ARG...]
      Start lttng-sessiond if none runs, create a session writing to DIR
      (default ./stalloc-lttng-PID), enable stalloc:* with the vpid, vtid
      and procname contexts, run COMMAND with STALLOC_LTTNG=1, stop and
      destroy the session, and print where the trace is.  Exits with
      COMMAND's status (1 if lttng itself failed).

  stalloc-lttng convert [-o OUTDIR] DIR
      Read the session in DIR with babeltrace2 and write allocation traces
      in stalloc's format v1, one file per process and device
      (OUTDIR/PROCNAME-VPID-DEV.trace, default OUTDIR: .), which
      stalloc-plan and stalloc-timeline read.  Allocation IDs are numbered
      per file; a free is matched to its allocation by address; markers go
      to every file of their process.

Exit status: 0 done, 1 error (a message says what), 2 bad usage.
"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS = {"alloc", "free", "plan_hit", "plan_miss", "map", "unmap", "grow",
          "shrink", "mark", "oom"}
LINE = re.compile(r"^\[(?P<ts>[0-9.]+)\] \([^)]*\) \S+ "
                  r"(?P<prov>[A-Za-z0-9_]+):(?P<ev>[A-Za-z0-9_]+): "
                  r"(?P<rest>.*)$")
FIELD = re.compile(r'(\w+) = ("(?:[^"\\]|\\.)*"|[^,}]+)')


def die(msg, code=1):
    print(f"stalloc-lttng: {msg}", file=sys.stderr)
    sys.exit(code)


def need(tool):
    if not shutil.which(tool):
        die(f"{tool} not found: install it (Debian: "
            f"{'babeltrace2' if tool == 'babeltrace2' else 'lttng-tools'})")


def lttng(*args, quiet=False):
    r = subprocess.run(["lttng", *args], capture_output=True, text=True)
    if r.returncode and not quiet:
        die(f"lttng {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r.returncode


def provider_lib():
    """STALLOC_LTTNG_LIB, else the provider shipped in the installed
    package, else the repository's build/, else the lib/ beside an
    installed tools/ (make install)."""
    env = os.environ.get("STALLOC_LTTNG_LIB")
    if env:
        return env
    root = os.path.join(HERE, "..", "..", "..")
    for cand in (os.path.join(HERE, "libstalloc-lttng.so"),
                 os.path.join(root, "build", "libstalloc-lttng.so"),
                 os.path.join(sys.prefix, "lib", "libstalloc-lttng.so")):
        if os.path.exists(cand):
            return os.path.abspath(cand)
    return None


def record(argv):
    out = None
    if argv[:1] == ["-o"]:
        if len(argv) < 2:
            die("-o needs a directory", 2)
        out, argv = argv[1], argv[2:]
    if argv[:1] != ["--"] or len(argv) < 2:
        die("usage: stalloc-lttng record [-o DIR] -- COMMAND [ARG...]", 2)
    cmd = argv[1:]
    need("lttng")
    need("lttng-sessiond")
    out = os.path.abspath(out or f"stalloc-lttng-{os.getpid()}")
    parent = os.path.dirname(out)
    if not os.access(parent, os.W_OK):
        die(f"{parent}: cannot write there")
    if lttng("list", quiet=True):
        subprocess.run(["lttng-sessiond", "--daemonize"],
                       capture_output=True)
    name = f"stalloc-{os.getpid()}"
    lttng("create", name, f"--output={out}")
    try:
        lttng("enable-event", "-u", "-s", name, "stalloc:*")
        lttng("add-context", "-u", "-s", name, "-t", "vpid", "-t", "vtid",
              "-t", "procname")
        lttng("start", name)
        env = dict(os.environ, STALLOC_LTTNG="1")
        lib = provider_lib()
        if lib:
            env.setdefault("STALLOC_LTTNG_LIB", lib)
        try:
            status = subprocess.run(cmd, env=env).returncode
        except OSError as e:
            lttng("destroy", name, quiet=True)
            die(f"{cmd[0]}: {e.strerror}")
        lttng("stop", name)
    finally:
        lttng("destroy", name, quiet=True)
    print(f"stalloc-lttng: trace in {out}")
    return status


def fields(rest):
    out = {}
    for k, v in FIELD.findall(rest):
        v = v.strip()
        if v.startswith('"'):
            out[k] = v[1:-1]
        else:
            out[k] = int(v, 0)
    return out


class Stream:
    """One output file: a process on a device."""

    def __init__(self, path):
        self.path = path
        self.lines = ["stalloc-trace 1\n",
                      "# converted by stalloc-lttng from an lttng session\n"]
        self.seq = 0
        self.next_id = 1
        self.live = {}
        self.lost = 0

    def add(self, text):
        self.lines.append(f"{text[0]} {self.seq}{text[1:]}\n")
        self.seq += 1


def convert(argv):
    out = "."
    if argv[:1] == ["-o"]:
        if len(argv) < 2:
            die("-o needs a directory", 2)
        out, argv = argv[1], argv[2:]
    if len(argv) != 1:
        die("usage: stalloc-lttng convert [-o OUTDIR] DIR", 2)
    src = argv[0]
    if not os.path.isdir(src):
        die(f"{src}: no such trace directory")
    need("babeltrace2")
    r = subprocess.run(["babeltrace2", "--clock-seconds", src],
                       capture_output=True, text=True)
    if r.returncode:
        die(f"babeltrace2 {src}: {r.stderr.strip().splitlines()[-1:]}")
    streams = {}
    procs = {}
    count = 0
    for n, line in enumerate(r.stdout.splitlines(), 1):
        m = LINE.match(line)
        if not m:
            die(f"{src}: event {n}: cannot read babeltrace2's line: "
                f"{line[:80]}")
        if m["prov"] != "stalloc" or m["ev"] not in EVENTS:
            die(f"{src}: event {n}: {m['prov']}:{m['ev']} is not a stalloc "
                f"event (is this a stalloc-lttng session?)")
        f = fields(m["rest"])
        if "vpid" not in f:
            die(f"{src}: event {n}: no vpid context (record with "
                f"stalloc-lttng record)")
        ns = int(round(float(m["ts"]) * 1e9))
        count += 1
        pid = f["vpid"]
        procs.setdefault(pid, f.get("procname", "proc"))
        if m["ev"] == "mark":
            for (p, _), s in streams.items():
                if p == pid:
                    s.add(f"m {f['label'].replace(' ', '_')}")
            continue
        if m["ev"] not in ("alloc", "free"):
            continue
        key = (pid, f["dev"])
        if key not in streams:
            path = os.path.join(out, f"{procs[pid]}-{pid}-{f['dev']}.trace")
            streams[key] = Stream(path)
        s = streams[key]
        keys = f"stream={f['stream']:x} dev={f['dev']} ns={ns}"
        if m["ev"] == "alloc":
            s.live[f["ptr"]] = s.next_id
            s.add(f"a {s.next_id} {f['size']} {keys}")
            s.next_id += 1
        else:
            ident = s.live.pop(f["ptr"], None)
            if ident is None:
                s.lost += 1
                continue
            s.add(f"f {ident} {keys}")
    if not count:
        die(f"{src}: the session holds no stalloc event")
    os.makedirs(out, exist_ok=True)
    for s in streams.values():
        try:
            with open(s.path, "w") as fh:
                fh.writelines(s.lines)
        except OSError as e:
            die(f"{s.path}: {e.strerror}")
        note = f" ({s.lost} frees of unknown addresses skipped)" \
            if s.lost else ""
        print(f"{s.path}: {s.seq} events{note}")
    return 0


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd == "record":
        return record(argv)
    if cmd == "convert":
        return convert(argv)
    die(f"unknown command {cmd!r} (want record or convert)", 2)


if __name__ == "__main__":
    sys.exit(main())
