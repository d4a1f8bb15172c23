#!/usr/bin/env python3
"""The independent client of the redis destination tests: redis-py (PyPI, in the test venv),
not the relay's hiredis. Reads stream entries with XRANGE into a JSON-lines file (appended from
where the last call stopped, so a test can read everything it received so far).

  redis_client.py drain  --port P --stream S --out FILE
  redis_client.py count  --port P --stream S                 (XLEN)
  redis_client.py exec   --port P ARG...                     (any command, e.g. DEL s)


Each drained entry is one line: {"entry" (its id), "fields" (text values; the binary-unsafe
ones as null), "payload_b64"}.
"""
import argparse
import base64
import json
import os
import sys


def _redis(port):
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)


def drain(a):
    r = _redis(a.port)
    cursor_file = a.out + ".cursor"
    start = "-"
    if os.path.exists(cursor_file):
        with open(cursor_file) as f:
            start = "(" + f.read().strip()
    last = None
    with open(a.out, "a") as out:
        while True:
            entries = r.xrange(a.stream, min=start, max="+", count=10000)
            if not entries:
                break
            for entry_id, fields in entries:
                eid = entry_id.decode()
                text = {}
                for k, v in fields.items():
                    try:
                        text[k.decode()] = v.decode("utf-8")
                    except UnicodeDecodeError:
                        text[k.decode()] = None
                out.write(json.dumps({"entry": eid, "fields": text,
                                      "payload_b64": base64.b64encode(fields.get(b"payload", b"")).decode()},
                                     sort_keys=True) + "\n")
                last = eid
            start = "(" + last
    if last is not None:
        with open(cursor_file, "w") as f:
            f.write(last)


def count(a):
    print(_redis(a.port).xlen(a.stream))


def execute(a):
    print(_redis(a.port).execute_command(*a.args))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("drain", "count"):
        s = sub.add_parser(name)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--stream", required=True)
        s.add_argument("--out")
    s = sub.add_parser("exec")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("args", nargs="+")
    a = p.parse_args()
    {"drain": drain, "count": count, "exec": execute}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
