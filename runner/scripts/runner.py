# The resident runner of swiftide-ssh-executor in Python 3: the protocol of PROTOCOL.md
# (beside this folder), as runner.pl and the helper speak it. Standard library only; Python
# 3.5 or later. Only this runner starts jobs (`J`, see `supervise`).
#
#   python3 runner.py NONCE spawn   commands start with posix_spawn (vfork); exit 127 where
#                                   this Python has none with setsid (before 3.8)
#   python3 runner.py NONCE fork    commands start with fork and exec
#
# The executor sends this file to `python3 -c LOADER NONCE MODE` on stdin; by hand it runs
# as above, reading frames on stdin.
import os
import select
import signal
import struct
import sys
import time

# Python ignores these for itself; commands get the default, as from sshd.
RESTORED = [s for s in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, s)]
DEFAULTS = [getattr(signal, s) for s in RESTORED]
nonce = sys.argv[1] if len(sys.argv) > 1 else ""
mode = sys.argv[2] if len(sys.argv) > 2 else "spawn"
# posix_spawn with a new session: Python 3.8 and later.
SPAWN = mode != "fork" and hasattr(os, "posix_spawnp") and sys.version_info >= (3, 8)
if mode == "spawn" and not SPAWN:
    # The client tries Perl next, whose fork is cheaper than this Python's.
    sys.stderr.write("python %d.%d has no posix_spawn with setsid\n" % sys.version_info[:2])
    sys.exit(127)
WINDOW = 4 * 1024 * 1024
MAX_DATA = 64 * 1024 * 1024
out = bytearray()
req = {}       # id -> dict(pid, open, unacked, kod, grace, status, term_at, killed, stdin, announce_at, job)
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
    if private_tmp is not None:
        import shutil
        shutil.rmtree(private_tmp, ignore_errors=True)
    os._exit(0)


def kill(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def now():
    return time.monotonic()


def spawn(shell, text, fd0, fd1, fd2, guard=None):
    """Starts `shell -c text` in a session of its own with these descriptors as 0, 1 and 2,
    under `guard` (see `parse_guard`) when given; its pid. Raises OSError when no process
    could be made."""
    if SPAWN and guard is None:
        # vfork and exec: no copy of this process's page tables, about half the CPU of
        # fork. A failed exec (no `sh`) raises here; the fork below then reports it as
        # the shell would, on the command's stderr with status 127.
        try:
            return os.posix_spawnp(
                shell, [b"sh", b"-c", text], os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, fd0, 0),
                    (os.POSIX_SPAWN_DUP2, fd1, 1),
                    (os.POSIX_SPAWN_DUP2, fd2, 2),
                ],
                setsid=True, setsigdef=DEFAULTS)
        except OSError:
            pass
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for name in RESTORED:
                signal.signal(getattr(signal, name), signal.SIG_DFL)
            os.dup2(fd0, 0)
            os.dup2(fd1, 1)
            os.dup2(fd2, 2)
            env = os.environ
            if guard is not None:
                env = apply_guard(guard)
            os.execvpe(shell, [b"sh", b"-c", text], env)
        except GuardError as error:
            try:
                os.write(2, ("swiftide-ssh runner: %s\n" % error).encode())
            except BaseException:
                pass
            os._exit(126)
        except BaseException as error:
            try:
                os.write(2, ("sh: %s\n" % error).encode())
            except BaseException:
                pass
        finally:
            os._exit(127)
    # The group exists once the child has called setsid: a kill sent before that would
    # find no group and be lost (a kill right behind the run request, on a loaded host).
    # It takes the child microseconds; it ends the wait by dying, too.
    while True:
        try:
            if os.getpgid(pid) == pid:
                break
        except OSError:
            break
        time.sleep(0)
    return pid


# Guards (PROTOCOL.md, "Guards"): limits and Landlock, checked here before anything starts
# and applied in the command's leader (forked, never posix_spawn: there is no hook there).
class GuardError(Exception):
    pass


LIMITS = {b"cpu": "RLIMIT_CPU", b"memory": "RLIMIT_AS", b"processes": "RLIMIT_NPROC",
          b"file_size": "RLIMIT_FSIZE", b"open_files": "RLIMIT_NOFILE"}
# Landlock's numbers (linux/landlock.h); its system calls have these on every architecture.
SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446
PR_SET_NO_NEW_PRIVS = 38
# ABI 3's write rights: write_file, remove_dir, remove_file, make_char/dir/reg/sock/fifo/
# block/sym, refer, truncate. Before ABI 3 truncate(2) is not checked: older kernels refuse.
WRITE_RIGHTS = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14))
FILE_RIGHTS = (1 << 1) | (1 << 14)
NET_RIGHTS = 1 | 2   # bind_tcp, connect_tcp
ALWAYS_WRITABLE = [b"/dev/null", b"/dev/zero", b"/dev/full", b"/dev/tty"]
private_tmp = None
landlock_abi = None


def parse_guard(data):
    """A guard's entries as a dict; GuardError names the first one it cannot take."""
    guard = dict(limits={}, writes=False, write=[], tmp=False, network=False, ports=[])
    for entry in bytes(data).split(b"\0"):
        if not entry:
            continue
        name, _, value = entry.partition(b"=")
        try:
            if name in LIMITS:
                guard["limits"][name] = int(value)
            elif entry == b"writes=confined":
                guard["writes"] = True
            elif name == b"write" and value:
                guard["write"].append(value)
            elif entry == b"tmp=private":
                guard["tmp"] = True
            elif entry == b"network=confined":
                guard["network"] = True
            elif name == b"port" and 0 <= int(value) <= 65535:
                guard["ports"].append(int(value))
            else:
                raise ValueError
        except ValueError:
            raise GuardError("guard: unknown entry %r" % entry.decode("utf-8", "replace"))
    return guard


LIBC = []


def libc():
    # Loaded once, in the runner: a forked leader finds it ready.
    if not LIBC:
        import ctypes
        LIBC.extend([ctypes, ctypes.CDLL(None, use_errno=True)])
    return LIBC[0], LIBC[1]


def landlock_call(number, *args):
    ctypes, c = libc()
    result = c.syscall(ctypes.c_long(number), *args)
    if result < 0:
        error = ctypes.get_errno()
        raise GuardError("guard: Landlock: %s" % os.strerror(error))
    return result


def check_guard(guard):
    """Raises GuardError unless this kernel enforces all of `guard`."""
    global landlock_abi
    if guard["limits"]:
        import resource  # noqa: F401 (imported here, so a forked leader finds it loaded)
    if not (guard["writes"] or guard["network"]):
        return
    if os.environ.get("SWIFTIDE_SSH_RUNNER_NO_LANDLOCK") is not None:
        raise GuardError("guard: Landlock is not available here: the kernel answered ENOSYS "
                         "(as SWIFTIDE_SSH_RUNNER_NO_LANDLOCK asks)")
    if landlock_abi is None:
        ctypes, _ = libc()
        try:
            landlock_abi = landlock_call(SYS_CREATE, ctypes.c_void_p(0), ctypes.c_size_t(0),
                                         ctypes.c_uint32(1))
        except GuardError as error:
            raise GuardError("guard: Landlock is not available here: %s" % str(error)[17:])
    if guard["writes"] and landlock_abi < 3:
        raise GuardError("guard: confined writes need Landlock ABI 3; this kernel has %d"
                         % landlock_abi)
    if guard["network"] and landlock_abi < 4:
        raise GuardError("guard: a confined network needs Landlock ABI 4; this kernel has %d"
                         % landlock_abi)


def guard_tmp():
    global private_tmp
    if private_tmp is None:
        import tempfile
        try:
            private_tmp = tempfile.mkdtemp(prefix="swiftide-ssh-").encode()
        except OSError as error:
            raise GuardError("guard: cannot make the private temporary directory: %s" % error)
    return private_tmp


def apply_guard(guard):
    """In the leader: the limits, then Landlock; the environment to exec with."""
    import resource
    for name, limit in guard["limits"].items():
        which = getattr(resource, LIMITS[name])
        hard_wanted = limit + 1 if name == b"cpu" else limit
        _, hard = resource.getrlimit(which)
        cap = (lambda v: v) if hard == resource.RLIM_INFINITY else (lambda v: min(v, hard))
        try:
            resource.setrlimit(which, (cap(limit), cap(hard_wanted)))
        except (OSError, ValueError) as error:
            raise GuardError("guard: cannot set the %s limit: %s" % (name.decode(), error))
    env = dict(os.environb) if hasattr(os, "environb") else os.environ
    if guard["tmp"] and private_tmp is not None:
        env[b"TMPDIR"] = private_tmp
    if not (guard["writes"] or guard["network"]):
        return env
    ctypes, c = libc()
    if c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise GuardError("guard: no_new_privs: %s" % os.strerror(ctypes.get_errno()))
    fs = WRITE_RIGHTS if guard["writes"] else 0
    net = NET_RIGHTS if guard["network"] else 0
    attr = struct.pack("=QQ", fs, net) if net else struct.pack("=Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = landlock_call(SYS_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if guard["writes"]:
        paths = guard["write"] + ALWAYS_WRITABLE + ([private_tmp] if guard["tmp"] else [])
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue   # nothing there to write beneath (as the helper skips it)
            import stat
            rights = WRITE_RIGHTS if stat.S_ISDIR(os.fstat(fd).st_mode) else FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
            landlock_call(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule,
                          ctypes.c_uint32(0))
            os.close(fd)
    for port in guard["ports"]:
        rule = ctypes.create_string_buffer(struct.pack("=QQ", 2, port), 16)
        landlock_call(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(2), rule,
                      ctypes.c_uint32(0))
    landlock_call(SYS_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    return env


def fault(rid, why):
    put(b"F", rid, why.encode())


def field(data, at):
    """The field of u32 length and bytes at `at`, and where the next starts; None past the end."""
    if at + 4 > len(data):
        return None
    (length,) = struct.unpack(">I", data[at:at + 4])
    if at + 4 + length > len(data):
        return None
    return bytes(data[at + 4:at + 4 + length]), at + 4 + length


def start(rid, data):
    if len(data) < 5:
        return fault(rid, "a run request of %d bytes is too short" % len(data))
    flags, grace = struct.unpack(">BI", data[:5])
    guard, at = None, 5
    if flags & 8:
        got = field(data, at)
        if got is None:
            return fault(rid, "a run request's guard runs past its %d bytes" % len(data))
        try:
            guard = parse_guard(got[0])
            check_guard(guard)
            if guard["tmp"]:
                guard_tmp()
        except GuardError as error:
            return fault(rid, str(error))
        at = got[1]
    got = field(data, at)
    if got is None:
        return fault(rid, "a run request's text runs past its %d bytes" % len(data))
    if rid in req:
        return fault(rid, "request %d is running already" % rid)
    text, at = got
    stdin = bytes(data[at:])
    shell = "/bin/sh" if flags & 4 else "sh"
    try:
        o_r, o_w = os.pipe()
        e_r, e_w = os.pipe()
        i_r, i_w = os.pipe() if flags & 2 else (None, None)
        pid = spawn(shell, text, i_r if flags & 2 else null, o_w, e_w, guard)
    except OSError as error:
        put(b"E", rid, ("swiftide-ssh runner: cannot start the command: %s\n" % error).encode())
        put(b"X", rid, b"c 126")
        return
    os.close(o_w)
    os.close(e_w)
    track(rid, pid, flags & 1, grace / 1000.0, now() + 0.002, [(o_r, b"O"), (e_r, b"E")])
    if flags & 2:
        os.close(i_r)
        if stdin:
            os.set_blocking(i_w, False)
            req[rid]["stdin"] = stdin
            writing[i_w] = rid
        else:
            os.close(i_w)


def track(rid, pid, kod, grace, announce_at, pipes, job=False):
    req[rid] = dict(pid=pid, open=len(pipes), unacked=0, kod=kod, grace=grace, status=None,
                    term_at=None, killed=False, stdin=None, announce_at=announce_at, job=job)
    by_pid[pid] = rid
    for fd, kind in pipes:
        reading[fd] = (rid, kind)


def parse_job(data):
    """A job request's cap, deadline, grace and its four fields (id, spec, params, text);
    raises ValueError when it does not parse."""
    if len(data) < 20:
        raise ValueError("a job request of %d bytes is too short" % len(data))
    cap, deadline, grace = struct.unpack(">QQI", data[:20])
    fields = []
    at = 20
    for _ in range(4):
        if at + 4 > len(data):
            raise ValueError("a job request's fields run past its %d bytes" % len(data))
        (length,) = struct.unpack(">I", data[at:at + 4])
        if at + 4 + length > len(data):
            raise ValueError("a job request's fields run past its %d bytes" % len(data))
        fields.append(bytes(data[at + 4:at + 4 + length]))
        at += 4 + length
    return (cap, deadline, grace) + tuple(fields)


def start_job(rid, data):
    if rid in req:
        return fault(rid, "request %d is running already" % rid)
    try:
        job = parse_job(data)
    except ValueError as error:
        return fault(rid, str(error))
    # A job (see src/command/resident/job.rs): a supervisor, forked and detached, starts and
    # spools it; what it says (its answer, the spooled output, the end) comes back on a pipe
    # as this request's stdout. Never killed from here: it outlives the connection.
    try:
        m_r, m_w = os.pipe()
        pid = os.fork()
    except OSError as error:
        put(b"O", rid, record(b"a", ("fallback cannot fork: %s" % error).encode()))
        put(b"X", rid, b"c 0")
        return
    if pid == 0:
        # Forked twice: the supervisor is no descendant of this runner, or of sshd's
        # session, so nothing that ends those (a restart that kills the session's tree)
        # ends the job. This first child exits at once, and the runner reaps it.
        try:
            if os.fork() == 0:
                supervise(m_w, job)
        finally:
            os._exit(0)
    os.close(m_w)
    track(rid, pid, 0, 0.0, None, [(m_r, b"O")], job=True)


def announce(rid):
    r = req.get(rid)
    if r is not None and r["announce_at"] is not None:
        r["announce_at"] = None
        put(b"S", rid, str(r["pid"]).encode())


def stop(rid):
    r = req.get(rid)
    # A job's supervisor is never killed from here: the job outlives the connection.
    if r is None or r["term_at"] is not None or r["job"]:
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
        # A job's request ends with its supervisor's pipe: the supervisor lives on with the
        # job, and is reaped unannounced.
        if r["open"] > 0 or (r["status"] is None and not r["job"]):
            continue
        by_pid.pop(r["pid"], None)
        announce(rid)
        # Stdin the command never read (it ended, or closed it): dropped, as LocalExecutor
        # drops it.
        for fd in [fd for fd, owner in writing.items() if owner == rid]:
            del writing[fd]
            os.close(fd)
        del req[rid]
        put(b"X", rid, end_of(r["status"]) if r["status"] is not None else b"c 0")


def read_some(fd):
    """What a pipe has: bytes, b"" at its end (or on an error), None when nothing now."""
    try:
        return os.read(fd, 65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def record(tag, data):
    return struct.pack(">cI", tag, len(data)) + data


# What a job's supervisor mirrors to the client at most: the rest is read from the spool
# files. It bounds the client's memory and the channel's traffic per job.
MIRROR_MAX = 4 * 1024 * 1024


class Mirror(object):
    """What a job's supervisor tells its client, on fd 3 (the runner forwards it): records
    `[tag][u32 length][data]`. Non-blocking: while the runner is slower than the job, the
    records wait here (at most MIRROR_MAX of output), never holding the spooling up."""

    def __init__(self):
        self.pending = bytearray()
        self.open = True
        self.accepting = True
        self.sent = 0

    def say(self, tag, payload):
        if not self.accepting:
            return
        if tag in (b"o", b"e"):
            if self.sent + len(payload) > MIRROR_MAX:
                # The limit: the client reads the rest from the files.
                self.pending.extend(record(b"l", b""))
                self.accepting = False
                self.pump()
                return
            self.sent += len(payload)
        self.pending.extend(record(tag, payload))
        self.pump()

    def pump(self):
        while self.open and self.pending:
            try:
                n = os.write(3, self.pending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # The runner is gone (its connection closed): the job goes on unmirrored.
                self.close()
                return
            del self.pending[:n]
        if self.open and not self.accepting and not self.pending:
            self.close()

    def waiting(self):
        return self.open and bool(self.pending)

    def finish(self):
        # The last records: waits a few seconds at most for a runner that does not read.
        self.accepting = False
        give_up = now() + 5
        while self.waiting() and now() < give_up:
            try:
                select.select([], [3], [], 0.1)
            except InterruptedError:
                pass
            self.pump()
        self.close()

    def close(self):
        if self.open:
            self.open = False
            self.accepting = False
            del self.pending[:]
            os.close(3)


def supervise(mirror_fd, job):
    """A job's supervisor: the forked child of the runner, in a session of its own. It lays
    out the job's directory as the shell start does (src/jobs/script.rs), starts the command,
    spools its output with the cap, keeps the records and the deadline, and says what it did
    on fd 3. Any doubt before the job runs answers `fallback`: the client then runs the shell
    start, which decides every such case as before."""
    cap, deadline, grace, jid, spec, params, text = job
    os.setsid()
    signal.set_wakeup_fd(-1)
    del out[:]
    # The runner's descriptors (its channel, other commands' pipes) are not the job's.
    os.dup2(mirror_fd, 3, inheritable=False)
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(4, 65536)
    for fd in fds:
        if fd > 3:
            try:
                os.close(fd)
            except OSError:
                pass
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.set_blocking(3, False)
    os.chdir("/")
    mirror = Mirror()
    env = os.environb
    b = (env.get(b"XDG_STATE_HOME") or env.get(b"HOME", b"") + b"/.local/state") + b"/swiftide-ssh/jobs"
    d = b + b"/" + jid

    def fallback(why):
        mirror.say(b"a", b"fallback " + why)
        mirror.finish()

    def write_file(name, content, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
        fd = os.open(d + b"/" + name, flags, 0o666)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def in_place(name, content):
        # Over the padding: no new block needed on a full disk (see src/jobs/script.rs).
        try:
            write_file(name, content, os.O_WRONLY | os.O_CREAT)
        except OSError:
            pass

    if not b.startswith(b"/"):
        return fallback(b"no absolute state directory")
    try:
        if not os.path.isdir(b):
            os.makedirs(b)
            os.chmod(b[:-len(b"/jobs")], 0o700)
            os.chmod(b, 0o700)
        try:
            os.mkdir(d, 0o700)
            os.chmod(d, 0o700)
        except FileExistsError:
            pass
    except OSError as error:
        return fallback(str(error).encode())
    # A new job is claimed by creating `new` (O_EXCL); anything else (a retry, an id taken,
    # a job of an earlier build) is the shell start's to decide.
    if os.path.lexists(d + b"/spec"):
        return fallback(b"the job exists")
    def claim(name):
        # As the shell start's `set -C` redirection: created only if missing (O_EXCL).
        try:
            os.close(os.open(d + b"/" + name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return True
        except OSError:
            return False

    if not claim(b"new"):
        return fallback(b"the job is claimed")
    try:
        write_file(b"launch", b"")
        write_file(b"params", params)
        for name in (b"pid", b"exit.tmp", b"reason", b"stdout.drop", b"stderr.drop",
                     b"stdout.err", b"stderr.err"):
            write_file(name, b" " * 256)
        write_file(b"stdout", b"")
        write_file(b"stderr", b"")
        write_file(b"spec", spec)
    except OSError:
        # Unclaimed again: the shell start claims it and names the cause (a full disk).
        try:
            os.unlink(d + b"/new")
        except OSError:
            pass
        return fallback(b"cannot write the job's files")
    if not claim(b"started"):
        return fallback(b"another start runs the job")
    try:
        o_r, o_w = os.pipe()
        e_r, e_w = os.pipe()
        null_in = os.open("/dev/null", os.O_RDONLY)
        child = spawn("sh", text, null_in, o_w, e_w)
    except OSError as error:
        in_place(b"failed", ("cannot start the job: %s\n" % error).encode())
        return fallback(b"cannot start the job")
    for fd in (o_w, e_w, null_in):
        os.close(fd)

    def start_time(pid):
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                stat = f.read()
            return stat[stat.rindex(b")") + 2:].split()[19].decode()
        except (OSError, ValueError, IndexError):
            return "-"

    def first_word(path):
        try:
            with open(path, "rb") as f:
                return f.readline().split()[0].decode()
        except (OSError, IndexError):
            return ""

    def clock():
        u = first_word("/proc/uptime")
        return "@" + u.split(".")[0] if u[:1].isdigit() else "-"

    boot = first_word("/proc/sys/kernel/random/boot_id") or "-"
    line = "%d %s %d %s %s %s\n" % (child, start_time(child), os.getpid(),
                                     start_time(os.getpid()), boot, clock())
    try:
        write_file(b"pid", line.encode(), os.O_WRONLY)
    except OSError as error:
        # As the shell start's job: no unrecorded job runs.
        kill(child, signal.SIGKILL)
        in_place(b"failed", ("cannot record the job's start: %s\n" % error).encode())
        return fallback(b"cannot record the job's start")
    mirror.say(b"a", b"ok " + b)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    streams = {}
    for fd, name, tag in ((o_r, b"stdout", b"o"), (e_r, b"stderr", b"e")):
        streams[fd] = dict(name=name, tag=tag, spool=os.open(d + b"/" + name, os.O_WRONLY),
                           written=0, dropped=0, status=0)
    drops = {}
    status = None
    ended_at = None
    term_at = now() + deadline / 1000.0 if deadline else None
    kill_at = None
    # Until the leader is reaped and both streams have ended, as the shell runner.
    while streams or status is None:
        if status is None:
            try:
                pid, raw = os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pid, raw = child, 0
            if pid == child:
                # As `wait` in sh reports it: 128 + the signal.
                status = 128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
                ended_at = clock()
                in_place(b"exit.tmp", ("%d %s\n" % (status, ended_at)).encode())
                continue
        t = now()
        if term_at is not None and t >= term_at:
            # The deadline: the first reason recorded wins (a kill's), then TERM, grace, KILL.
            term_at = None
            try:
                with open(d + b"/reason", "rb") as f:
                    reason = f.read().strip()
            except OSError:
                reason = b""
            if not reason:
                in_place(b"reason", b"deadline")
            kill(child, signal.SIGTERM)
            kill_at = t + grace / 1000.0
        if kill_at is not None and t >= kill_at:
            kill_at = None
            kill(child, signal.SIGKILL)
        timers = [x - t for x in (term_at, kill_at) if x is not None]
        timeout = max(0.0, min(timers)) if timers else None
        try:
            ready_r, ready_w, _ = select.select(
                list(streams) + [wake_r], [3] if mirror.waiting() else [], [], timeout)
        except InterruptedError:
            continue
        if ready_w:
            mirror.pump()
        if wake_r in ready_r:
            try:
                os.read(wake_r, 4096)
            except OSError:
                pass
        for fd in ready_r:
            st = streams.get(fd)
            if st is None:
                continue
            got = read_some(fd)
            if got is None:
                continue
            if not got:
                os.close(fd)
                os.close(st["spool"])
                del streams[fd]
                drops[st["name"]] = ("%d %d %d" % (st["status"], st["dropped"], cap)).encode()
                in_place(st["name"] + b".drop", drops[st["name"]])
                continue
            # Up to the cap, written at once (a running job's output is readable); past it,
            # or after a failed write, only counted.
            keep = got[:max(0, cap - st["written"])] if st["status"] == 0 else b""
            view = memoryview(keep)
            try:
                while view:
                    view = view[os.write(st["spool"], view):]
            except OSError as error:
                st["status"] = 1
                in_place(st["name"] + b".err", ("cannot write %s: %s" % (
                    st["name"].decode(), error.strerror)).encode())
            wrote = len(keep) - len(view)
            st["written"] += wrote
            st["dropped"] += len(got) - wrote
            if wrote:
                mirror.say(st["tag"], keep[:wrote])
    exit_line = ("%d %s\n" % (status, ended_at)).encode()
    try:
        write_file(b"exit", exit_line)
    except OSError:
        try:
            os.rename(d + b"/exit.tmp", d + b"/exit")
        except OSError:
            pass
    # The end as the records say it: `exit`, then both `.drop` records, a line each.
    mirror.say(b"z", exit_line + drops[b"stdout"] + b"\n" + drops[b"stderr"] + b"\n")
    mirror.finish()


def request(kind, rid, data):
    if kind == b"R":
        start(rid, data)
    elif kind == b"J":
        start_job(rid, data)
    elif kind == b"K":
        stop(rid)
    elif kind == b"A":
        if len(data) != 4:
            fault(rid, "an ack of %d bytes, not 4" % len(data))
        elif rid in req:
            req[rid]["unacked"] -= struct.unpack(">I", data)[0]
    else:
        fault(rid, "unknown request kind 0x%02x" % ord(kind))


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
        if r["open"] == 0 and r["status"] is None and not r["job"]:
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
            if length > MAX_DATA:
                # Nothing after it can be framed: end as on a disconnect.
                fault(0, "a frame of %d bytes is over the limit of %d" % (length, MAX_DATA))
                flush()
                disconnected()
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
        got = read_some(fd)
        if got is None:
            continue
        if not got:
            del reading[fd]
            os.close(fd)
            req[rid]["open"] -= 1
            continue
        req[rid]["unacked"] += len(got)
        announce(rid)
        put(kind, rid, got)
