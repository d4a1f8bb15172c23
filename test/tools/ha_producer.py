#!/usr/bin/env python3
"""Producers of the high-availability tier (test/t/131_patroni_ha.pl), as an application runs
them against a cluster with failover: N connections (psycopg2, libpq's multi-host connection
string with target_session_attrs=read-write) together committing about RATE messages a second
until SIGTERM, each transaction inserting one message for DESTINATION and its event id into table
`produced (event_id uuid, destination text)` (what exists on the timeline that survives is
exactly what that table holds there).
A transaction that fails is retried as an application retries one: reconnect (libpq finds the
primary), then a new attempt, with a new message; a failure at commit leaves the outcome unknown
(the commit may have happened: its message then exists without having been acknowledged).

Every acknowledged commit is written at once to OUT/acked-<client>.txt as
"<event_id> <epoch seconds of the acknowledgement> <server port>". On SIGTERM each client
finishes its transaction and a summary is printed as JSON: acknowledged, failed attempts,
reconnects, and the longest time a client went without an acknowledgement.

  ha_producer.py --dsn CONNINFO --out DIR [--clients 8] [--rate 500] [--destination ha]
"""
import argparse
import json
import os
import signal
import threading
import time

import psycopg2

stop = threading.Event()

INSERT = """
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    VALUES (%(destination)s, %(key)s,
            jsonb_build_object('n', %(n)s, 'client', %(client)s, 'port', inet_server_port()))
    RETURNING event_id)
INSERT INTO produced (event_id, destination) SELECT event_id, %(destination)s FROM m
RETURNING event_id::text, inet_server_port()
"""


def client(i, a, stats):
    interval = a.clients / a.rate
    out = open(os.path.join(a.out, f"acked-{i}.txt"), "a", buffering=1)
    conn = None
    n = 0
    last_ack = time.time()
    next_at = time.time()
    while not stop.is_set():
        now = time.time()
        if now < next_at:
            stop.wait(next_at - now)
            continue
        next_at += interval
        if next_at < now - 1:
            next_at = now  # after an outage: no burst to catch up
        try:
            if conn is None:
                conn = psycopg2.connect(a.dsn)
                conn.autocommit = True  # each statement is its own transaction
                stats["reconnects"][i] += 1
            n += 1
            with conn.cursor() as cur:
                cur.execute(INSERT, {"destination": a.destination, "key": f"k{i}-{n % 16}",
                                     "n": n, "client": i})
                event_id, port = cur.fetchone()
            t = time.time()
            out.write(f"{event_id} {t:.3f} {port}\n")
            stats["acked"][i] += 1
            stats["max_gap"][i] = max(stats["max_gap"][i], t - last_ack)
            last_ack = t
        except psycopg2.Error as e:
            stats["failed"][i] += 1
            stats["last_error"][i] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            try:
                if conn is not None:
                    conn.close()
            except psycopg2.Error:
                pass
            conn = None
            stop.wait(0.1)
    out.close()
    if conn is not None:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rate", type=float, default=500)
    ap.add_argument("--destination", default="ha")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stats = {k: [0] * a.clients for k in ("acked", "failed", "reconnects", "max_gap")}
    stats["last_error"] = [""] * a.clients
    threads = [threading.Thread(target=client, args=(i, a, stats)) for i in range(a.clients)]
    started = time.time()
    for t in threads:
        t.start()
    with open(os.path.join(a.out, "started"), "w") as f:
        f.write(f"{started:.3f}\n")
    while not stop.is_set():
        stop.wait(0.5)
    for t in threads:
        t.join()
    elapsed = time.time() - started
    print(json.dumps({"acked": sum(stats["acked"]), "failed": sum(stats["failed"]),
                      "reconnects": sum(stats["reconnects"]),
                      "max_gap_s": round(max(stats["max_gap"]), 3),
                      "rate": round(sum(stats["acked"]) / elapsed, 1),
                      "seconds": round(elapsed, 1),
                      "last_errors": sorted(set(e for e in stats["last_error"] if e))}))


if __name__ == "__main__":
    main()
