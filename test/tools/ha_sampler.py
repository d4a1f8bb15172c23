#!/usr/bin/env python3
"""Watches every member of a Patroni cluster (test/tools/patroni_cluster) while a test runs, for
test/t/131_patroni_ha.pl: every INTERVAL seconds until SIGTERM, one JSON line per member to OUT:

  {"round": n, "t": epoch, "node": name, "up": bool, "recovery": bool or null,
   "postmaster": pid or null, "backends": outbox processes in its pg_stat_activity,
   "delivered": sum of outbox.workers().delivered, "procs": [[pid, ppid, kind], ...]}

`backends` and `recovery` come from one query (so a worker seen there was seen while the server
was, or was not, in recovery). `procs` are the member's outbox processes as the kernel has them,
whether PostgreSQL still knows them or not (a backend left behind by a killed postmaster): every
process whose working directory is the member's data directory (PostgreSQL's processes run
there, outbox-driver inherits it) and that is an outbox launcher, worker or inbox worker, or an
outbox-driver. They are read once per round, before its queries: a process found there and a
server found in recovery after it, with the same postmaster, is a worker that ran on a replica.

  ha_sampler.py --cluster DIR --out FILE [--interval 0.2] [--dbname app]
"""
import argparse
import json
import os
import signal
import threading
import time

import psycopg2

stop = threading.Event()

QUERY = """
SELECT pg_is_in_recovery(),
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type IN ('outbox launcher', 'outbox worker', 'outbox inbox worker')),
       (SELECT coalesce(sum(delivered), 0) FROM outbox.workers())
"""


def outbox_procs(data_dirs):
    """{data_dir: [[pid, ppid, kind], ...]} of the outbox processes running in each."""
    found = {d: [] for d in data_dirs}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            if cwd not in found:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours
        if "outbox-driver" in cmd.split(" ")[0]:
            kind = "driver"
        elif "outbox inbox worker" in cmd:
            kind = "inbox"
        elif "outbox worker" in cmd:
            kind = "worker"
        elif "outbox launcher" in cmd:
            kind = "launcher"
        else:
            continue
        found[cwd].append([int(entry), ppid, kind])
    return found


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--dbname", default="app")
    a = ap.parse_args()
    with open(os.path.join(a.cluster, "cluster.json")) as f:
        members = json.load(f)["members"]
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    conns = {}
    out = open(a.out, "a", buffering=1)
    rounds = 0
    while not stop.is_set():
        rounds += 1
        t0 = time.time()
        procs = outbox_procs([os.path.realpath(m["data_dir"]) for m in members])
        for m in members:
            row = {"round": rounds, "t": int(time.time() * 1000) / 1000, "node": m["name"],
                   "up": False, "recovery": None,
                   "postmaster": read_pid(os.path.join(m["data_dir"], "postmaster.pid")),
                   "backends": None, "delivered": None,
                   "procs": procs[os.path.realpath(m["data_dir"])]}
            try:
                conn = conns.get(m["name"])
                if conn is None:
                    conn = psycopg2.connect(host="127.0.0.1", port=m["port"], dbname=a.dbname,
                                            user="postgres", connect_timeout=1,
                                            application_name="ha_sampler",
                                            options="-c statement_timeout=1000")
                    conn.autocommit = True
                    conns[m["name"]] = conn
                with conn.cursor() as cur:
                    cur.execute(QUERY)
                    recovery, backends, delivered = cur.fetchone()
                del conn.notices[:]  # outbox.workers() says on a replica that it is one
                row.update(up=True, recovery=recovery, backends=backends, delivered=int(delivered))
            except psycopg2.Error as e:
                row["error"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                bad = conns.pop(m["name"], None)
                if bad is not None:
                    try:
                        bad.close()
                    except psycopg2.Error:
                        pass
            out.write(json.dumps(row) + "\n")
        stop.wait(max(0.0, a.interval - (time.time() - t0)))
    out.close()


if __name__ == "__main__":
    main()
