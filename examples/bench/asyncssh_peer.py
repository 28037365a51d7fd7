"""asyncssh peer for the swiftide-ssh-executor benchmark: one connection, concurrent channels.

Invoked by examples/bench as `python asyncssh_peer.py mode=... host=... port=... ...`; prints
one `RESULT k=v ...` line.
"""
import asyncio
import os
import resource
import sys
import time

import asyncssh


def opts():
    return dict(a.split("=", 1) for a in sys.argv[1:])


async def connect(o):
    return await asyncssh.connect(
        o["host"],
        port=int(o["port"]),
        username=o["user"],
        client_keys=[o["key"]],
        known_hosts=o["known_hosts"],
        agent_path=None,
        config=[],
    )


class Counts:
    ok = 0
    errors = 0
    retries = 0


async def run_true(conn, counts):
    """`true` on a new channel; a refused channel open (MaxSessions) is retried like ours."""
    for attempt in range(10):
        try:
            result = await conn.run("true", check=False)
        except asyncssh.ChannelOpenError:
            counts.retries += 1
            await asyncio.sleep(min(0.001 * 2 ** attempt, 0.05))
            continue
        except Exception:  # noqa: BLE001 - counted, not raised
            counts.errors += 1
            return
        if result.exit_status == 0:
            counts.ok += 1
        else:
            counts.errors += 1
        return
    counts.errors += 1


async def many(conn, total, concurrency, inflight):
    counts = Counts()
    sem = asyncio.Semaphore(inflight)
    todo = iter(range(total))

    async def worker():
        for _ in todo:
            async with sem:
                await run_true(conn, counts)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, counts


def cpu_secs():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_busy():
    # The benchmark's CPU cgroup when it has one (its processes only), as the Rust side
    # measures; else the whole machine.
    usage = os.environ.get("SWB_CPU_USAGE")
    if usage:
        with open(usage) as f:
            text = f.read()
        if os.environ.get("SWB_CPU_V2") == "1":
            for line in text.splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        else:
            return int(text.strip()) / 1e9
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


async def main():
    o = opts()
    mode = o["mode"]
    if mode == "latency":
        conn = await connect(o)
        for _ in range(10):
            await conn.run("true", check=False)
        samples = []
        for _ in range(int(o["n"])):
            t = time.perf_counter()
            await conn.run("true", check=False)
            samples.append(time.perf_counter() - t)
        print("RESULT samples_us=" + ",".join(str(int(s * 1e6)) for s in samples))
    elif mode == "throughput":
        conn = await connect(o)
        total, concurrency = int(o["total"]), int(o["concurrency"])
        inflight = min(concurrency, int(o.get("max_channels", "8")))
        await many(conn, inflight * 4, concurrency, inflight)  # warm-up
        cpu0, machine0 = cpu_secs(), machine_busy()
        elapsed, c = await many(conn, total, concurrency, inflight)
        cpu, machine = cpu_secs() - cpu0, machine_busy() - machine0
        print(f"RESULT elapsed={elapsed} ok={c.ok} errors={c.errors} retries={c.retries} "
              f"inflight={inflight} cpu={cpu} machine_cpu={machine}")
    elif mode == "coldstart":
        started = time.perf_counter()
        conn = await connect(o)
        callers = int(o["callers"])
        _, c = await many(conn, callers, callers, min(callers, int(o.get("max_channels", "8"))))
        elapsed = time.perf_counter() - started
        print(f"RESULT elapsed={elapsed} ok={c.ok} errors={c.errors} retries={c.retries}")
    elif mode == "forward":
        # asyncssh's `ssh -L`: listens until killed; says where once it does.
        conn = await connect(o)
        listener = await conn.forward_local_port(
            "127.0.0.1", int(o["listen_port"]), "127.0.0.1", int(o["dest_port"]))
        print(f"LISTENING port={listener.get_port()}", flush=True)
        await listener.wait_closed()
    else:
        raise SystemExit(f"unknown mode {mode}")


asyncio.run(main())
