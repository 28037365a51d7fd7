# The resident runner of swiftide-ssh-executor in Python 3: the same protocol and behaviour
# as runner.pl (see it, and src/command/resident/mod.rs). Standard library only; Python 3.5
# or later. Commands start with posix_spawn (vfork) on Python 3.8 and later, else with fork.
# The client prepends `nonce` and `require_spawn`.
import errno
import os
import select
import signal
import struct
import sys
import time

# Python ignores these for itself; commands get the default, as from sshd.
RESTORED = [s for s in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, s)]
DEFAULTS = [getattr(signal, s) for s in RESTORED]
# posix_spawn with a new session: Python 3.8 and later.
SPAWN = hasattr(os, "posix_spawnp") and sys.version_info >= (3, 8)
if require_spawn and not SPAWN:
    # The client tries Perl next, whose fork is cheaper than this Python's.
    sys.stderr.write("python %d.%d has no posix_spawn with setsid\n" % sys.version_info[:2])
    sys.exit(127)
WINDOW = 4 * 1024 * 1024
out = bytearray()
req = {}       # id -> dict(pid, open, unacked, kod, grace, status, term_at, killed, stdin, announce_at)
by_pid = {}    # leader pid -> id
reading = {}   # fd -> (id, b"O" or b"E")
writing = {}   # fd -> id
inbuf = bytearray()
stdin_open = True
null = os.open("/dev/null", os.O_RDONLY)
# A leader's end wakes the wait: Python retries select after a signal, but not past this
# pipe becoming readable.
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)


def put(kind, rid, data):
    out.extend(struct.pack(">cII", kind, rid, len(data)))
    out.extend(data)
    if len(out) >= 65536:
        flush()


def flush():
    view = memoryview(bytes(out))
    del out[:]
    while view:
        try:
            n = os.write(1, view)
        except InterruptedError:
            continue
        except OSError:
            disconnected()
        view = view[n:]


def disconnected():
    # The client is gone: SIGKILL the group of every command whose leader still runs, when
    # the executor asked for that.
    for r in req.values():
        if r["kod"] and r["status"] is None:
            kill(r["pid"], signal.SIGKILL)
    os._exit(0)


def kill(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def now():
    return time.monotonic()


def start(rid, data):
    flags, grace, length = struct.unpack(">BII", data[:9])
    text = bytes(data[9:9 + length])
    stdin = bytes(data[9 + length:])
    shell = "/bin/sh" if flags & 4 else "sh"
    pid = None
    try:
        o_r, o_w = os.pipe()
        e_r, e_w = os.pipe()
        i_r, i_w = os.pipe() if flags & 2 else (None, None)
        if SPAWN:
            # vfork and exec: no copy of this process's page tables, about half the CPU of
            # fork. A failed exec (no `sh`) raises here; the fork below then reports it as
            # the shell would, on the command's stderr with status 127.
            try:
                pid = os.posix_spawnp(
                    shell, [b"sh", b"-c", text], os.environ,
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, i_r if flags & 2 else null, 0),
                        (os.POSIX_SPAWN_DUP2, o_w, 1),
                        (os.POSIX_SPAWN_DUP2, e_w, 2),
                    ],
                    setsid=True, setsigdef=DEFAULTS)
            except OSError:
                pid = None
        if pid is None:
            pid = os.fork()
    except OSError as error:
        put(b"E", rid, ("swiftide-ssh runner: cannot start the command: %s\n" % error).encode())
        put(b"X", rid, b"c 126")
        return
    if pid == 0:
        try:
            os.setsid()
            for name in RESTORED:
                signal.signal(getattr(signal, name), signal.SIG_DFL)
            os.dup2(i_r if flags & 2 else null, 0)
            os.dup2(o_w, 1)
            os.dup2(e_w, 2)
            os.execvp(shell, [b"sh", b"-c", text])
        except BaseException as error:
            try:
                os.write(2, ("sh: %s\n" % error).encode())
            except BaseException:
                pass
        finally:
            os._exit(127)
    os.close(o_w)
    os.close(e_w)
    r = dict(pid=pid, open=2, unacked=0, kod=flags & 1, grace=grace / 1000.0, status=None,
             term_at=None, killed=False, stdin=None, announce_at=now() + 0.002)
    req[rid] = r
    by_pid[pid] = rid
    reading[o_r] = (rid, b"O")
    reading[e_r] = (rid, b"E")
    if flags & 2:
        os.close(i_r)
        if stdin:
            os.set_blocking(i_w, False)
            r["stdin"] = stdin
            writing[i_w] = rid
        else:
            os.close(i_w)


def announce(rid):
    r = req.get(rid)
    if r is not None and r["announce_at"] is not None:
        r["announce_at"] = None
        put(b"S", rid, str(r["pid"]).encode())


def stop(rid):
    r = req.get(rid)
    if r is None or r["term_at"] is not None:
        return
    if r["grace"] == 0 or r["status"] is not None:
        if r["grace"]:
            kill(r["pid"], signal.SIGTERM)
        kill(r["pid"], signal.SIGKILL)
        r["term_at"] = 0
        r["killed"] = True
    else:
        kill(r["pid"], signal.SIGTERM)
        r["term_at"] = now()


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = by_pid.pop(pid, None)
        if rid is None:
            continue
        r = req[rid]
        r["status"] = status
        if r["term_at"] is not None and not r["killed"]:
            kill(r["pid"], signal.SIGKILL)
            r["killed"] = True


def end_of(status):
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name[3:]
        except ValueError:
            name = str(number)
        return ("s %s %d" % (name, 1 if os.WCOREDUMP(status) else 0)).encode()
    return ("c %d" % os.WEXITSTATUS(status)).encode()


def finish():
    for rid in list(req):
        r = req[rid]
        if r["open"] > 0 or r["status"] is None:
            continue
        announce(rid)
        # Stdin the command never read (it ended, or closed it): dropped, as LocalExecutor
        # drops it.
        for fd in [fd for fd, owner in writing.items() if owner == rid]:
            del writing[fd]
            os.close(fd)
        del req[rid]
        put(b"X", rid, end_of(r["status"]))


def request(kind, rid, data):
    if kind == b"R":
        start(rid, data)
    elif kind == b"K":
        stop(rid)
    elif kind == b"A" and rid in req:
        req[rid]["unacked"] -= struct.unpack(">I", data[:4])[0]


put(b"H", 0, ("%s python %d.%d.%d %d" % ((nonce,) + tuple(sys.version_info[:3]) + (os.getpid(),))).encode())
flush()
while True:
    reap()
    finish()
    if not stdin_open:
        flush()
        disconnected()
    rlist = [0, wake_r] + [fd for fd, (rid, _) in reading.items() if req[rid]["unacked"] < WINDOW]
    wlist = list(writing)
    timeout = None
    t = now()
    for r in req.values():
        if r["term_at"] is not None and not r["killed"]:
            left = max(0.0, r["term_at"] + r["grace"] - t)
            timeout = left if timeout is None else min(timeout, left)
        if r["announce_at"] is not None:
            left = max(0.0, r["announce_at"] - t)
            timeout = left if timeout is None else min(timeout, left)
        if r["open"] == 0 and r["status"] is None:
            timeout = 0.002 if timeout is None else min(timeout, 0.002)
    flush()
    ready_r, ready_w, _ = select.select(rlist, wlist, [], timeout)
    t = now()
    for rid in list(req):
        if req[rid]["announce_at"] is not None and t >= req[rid]["announce_at"]:
            announce(rid)
    for r in req.values():
        if r["term_at"] is not None and not r["killed"] and t >= r["term_at"] + r["grace"]:
            kill(r["pid"], signal.SIGKILL)
            r["killed"] = True
    if wake_r in ready_r:
        try:
            os.read(wake_r, 4096)
        except OSError:
            pass
    if 0 in ready_r:
        try:
            got = os.read(0, 65536)
        except InterruptedError:
            got = None
        except OSError:
            got = b""
        if got == b"":
            stdin_open = False
        elif got:
            inbuf.extend(got)
        while len(inbuf) >= 9:
            kind, rid, length = struct.unpack(">cII", bytes(inbuf[:9]))
            if len(inbuf) < 9 + length:
                break
            data = bytes(inbuf[9:9 + length])
            del inbuf[:9 + length]
            request(kind, rid, data)
    for fd in ready_w:
        rid = writing.get(fd)
        if rid is None:
            continue
        r = req[rid]
        try:
            n = os.write(fd, r["stdin"])
            r["stdin"] = r["stdin"][n:]
            done = not r["stdin"]
        except (BlockingIOError, InterruptedError):
            done = False
        except OSError:
            # The command closed its stdin without reading it all: not an error.
            done = True
        if done:
            del writing[fd]
            r["stdin"] = None
            os.close(fd)
    for fd in ready_r:
        if fd not in reading:
            continue
        rid, kind = reading[fd]
        try:
            got = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            got = b""
        if not got:
            del reading[fd]
            os.close(fd)
            req[rid]["open"] -= 1
            continue
        req[rid]["unacked"] += len(got)
        announce(rid)
        put(kind, rid, got)
