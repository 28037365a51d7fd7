"""Helpers for the benchmark's fleet scenario (examples/bench/fleet.rs).

`python fleet_peers.py rusage OUT CMD...`: runs CMD with stdin at /dev/null (its stdout
and stderr inherited), then writes the CPU and peak RSS of CMD's whole process tree
(RUSAGE_CHILDREN: every descendant that was waited for) to OUT as one `k=v ...` line.
This wrapper's own start-up is not counted.

`python fleet_peers.py asyncssh hosts=FILE user=U key=K known_hosts=KH cmd=... concurrency=N`:
the asyncssh peer: one connection per host (a line `127.0.0.1:PORT` each), all started
with `asyncio.gather` under a semaphore of N, `create_process(cmd)` on each; prints one
`RESULT k=v ...` line with the wall time, the CPU spent inside the run, the number of
correct outputs, and per host when it started (got past the semaphore) and when its first
output byte arrived, both from the start of the run.
"""
import asyncio
import os
import resource
import subprocess
import sys
import time


def rusage(out, cmd):
    rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write(f"rc={rc} utime={r.ru_utime} stime={r.ru_stime} maxrss_kb={r.ru_maxrss}\n")
    return rc


def cpu_secs():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def asyncssh_fleet(o):
    import asyncssh

    hosts = []
    with open(o["hosts"]) as f:
        for line in f:
            line = line.strip()
            if line:
                host, port = line.rsplit(":", 1)
                hosts.append((host, int(port)))
    cmd = o["cmd"]
    expect = o.get("expect", "Linux ")
    sem = asyncio.Semaphore(int(o.get("concurrency", "100")))
    cpu0 = cpu_secs()
    started = time.perf_counter()
    # Parsed once, as a fleet tool would, rather than once per connection.
    known_hosts = asyncssh.read_known_hosts(o["known_hosts"])
    start = [None] * len(hosts)
    first = [None] * len(hosts)
    errors = []

    async def one(i, host, port):
        async with sem:
            start[i] = time.perf_counter() - started
            try:
                async with asyncssh.connect(
                    host,
                    port=port,
                    username=o["user"],
                    client_keys=[o["key"]],
                    known_hosts=known_hosts,
                    agent_path=None,
                    config=[],
                ) as conn:
                    proc = await conn.create_process(cmd)
                    head = await proc.stdout.read(1)
                    first[i] = time.perf_counter() - started
                    rest = await proc.stdout.read()
                    await proc.wait()
                    return proc.exit_status == 0 and (head + rest).startswith(expect)
            except Exception as e:  # noqa: BLE001 - counted, not raised
                if len(errors) < 3:
                    errors.append(f"{host}:{port}: {e!r}")
                return False

    oks = await asyncio.gather(*(one(i, h, p) for i, (h, p) in enumerate(hosts)))
    elapsed = time.perf_counter() - started
    cpu = cpu_secs() - cpu0
    for e in errors:
        print("error:", e, file=sys.stderr)
    def ms(times):
        return ",".join("" if t is None else f"{t * 1e3:.2f}" for t in times)

    print(
        f"RESULT elapsed={elapsed} ok={sum(oks)} hosts={len(hosts)} cpu_in_run={cpu} "
        f"start_ms={ms(start)} first_ms={ms(first)}"
    )


def main():
    mode = sys.argv[1]
    if mode == "rusage":
        sys.exit(rusage(sys.argv[2], sys.argv[3:]))
    elif mode == "asyncssh":
        o = dict(a.split("=", 1) for a in sys.argv[2:])
        asyncio.run(asyncssh_fleet(o))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
