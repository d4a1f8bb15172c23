#!/usr/bin/python3
"""webhook_sink — a local HTTP/1.1 webhook receiver for the outbox tests.

Records every POST as one JSON line in a log file and answers with a
behaviour chosen by the URL path, so one sink can play several
destinations at once:

    /<name>[;option=value]...

    status=N        status for requests that are not failed (default 204)
    fail_first=N    the first N requests per distinct webhook-id header on
                    this path answer fail_status, later ones answer status
    fail_status=M   status for those failed requests (default 503)
    retry_after=S   add "Retry-After: S" to failing responses (fail_first
                    ones, or all responses when status itself is >= 400)
    delay_ms=N      sleep N ms before answering
    delay_first=N   only the first N requests per webhook-id on this path are
                    delayed (default: all)
    body=TEXT       response body (percent-decoded); default is empty, or
                    {"error":"<reason>"} for 4xx/5xx
    3xx statuses also send "Location: /elsewhere".

Control endpoints (GET): /_count, /_health, /_reset.  See README.md.

Usage: webhook_sink.py --port-file PATH --log PATH [--port N] [--bind ADDR]
                       [--verbose]
Standard library only; binds 127.0.0.1 (or ::1 with --bind ::1) only.
"""

import argparse
import base64
import http
import http.server
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse

DEFAULT_STATUS = 204
DEFAULT_FAIL_STATUS = 503
KNOWN_OPTIONS = {"status", "fail_first", "fail_status", "retry_after", "delay_ms", "delay_first",
                 "body"}
# Addresses the sink may listen on: loopback only.
BIND_ADDRESSES = ("127.0.0.1", "::1")


class BadOptions(ValueError):
    pass


def parse_behaviour(raw_path):
    """Splits '/name;k=v;...' (query string ignored) into the behaviour dict."""
    path = urllib.parse.urlsplit(raw_path).path
    parts = path.split(";")
    opts = {}
    for part in parts[1:]:
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or key not in KNOWN_OPTIONS:
            raise BadOptions("bad option %r" % part)
        opts[key] = urllib.parse.unquote(value)

    def int_opt(name, default, lo, hi):
        if name not in opts:
            return default
        try:
            v = int(opts[name])
        except ValueError:
            raise BadOptions("%s must be an integer" % name) from None
        if not lo <= v <= hi:
            raise BadOptions("%s out of range %d..%d" % (name, lo, hi))
        return v

    return {
        "status": int_opt("status", DEFAULT_STATUS, 200, 599),
        "fail_first": int_opt("fail_first", 0, 0, 1 << 30),
        "fail_status": int_opt("fail_status", DEFAULT_FAIL_STATUS, 200, 599),
        "retry_after": opts.get("retry_after"),
        "delay_ms": int_opt("delay_ms", 0, 0, 3600 * 1000),
        "delay_first": int_opt("delay_first", 1 << 30, 0, 1 << 30),
        "body": opts.get("body"),
    }


def json_bytes(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def reason_of(status):
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "status %d" % status


class State:
    """Counters and the log file, shared by all handler threads."""

    def __init__(self, log_path):
        self.lock = threading.Lock()
        self.log = open(log_path, "a", encoding="utf-8")
        self.total = 0
        self.by_path = {}
        self.attempts = {}  # (path, webhook-id or None) -> requests seen

    def count(self, path, webhook_id):
        """Counts one request; returns its 1-based attempt number."""
        with self.lock:
            self.total += 1
            self.by_path[path] = self.by_path.get(path, 0) + 1
            key = (path, webhook_id)
            self.attempts[key] = self.attempts.get(key, 0) + 1
            return self.attempts[key]

    def snapshot(self):
        with self.lock:
            return {"requests": self.total, "by_path": dict(self.by_path)}

    def reset(self):
        with self.lock:
            self.total = 0
            self.by_path.clear()
            self.attempts.clear()

    def write_log(self, record):
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self.lock:
            if not self.log.closed:  # closed only while shutting down
                self.log.write(line + "\n")
                self.log.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server_version = "webhook_sink/1"
    sys_version = ""
    disable_nagle_algorithm = True
    # Buffer the response so status line, headers and body leave in one
    # write; BaseHTTPRequestHandler flushes after each request.
    wbufsize = 64 * 1024
    # Idle keep-alive connections are closed after this many seconds.
    timeout = 300

    state = None  # set in main()
    verbose = False

    def version_string(self):
        return self.server_version

    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler API)
        if self.verbose:
            super().log_message(format, *args)

    def handle_expect_100(self):
        # The base class only buffers "100 Continue"; push it out now, or a
        # client waiting for it (curl does, for larger bodies) stalls.
        ok = super().handle_expect_100()
        self.wfile.flush()
        return ok

    # --- helpers -----------------------------------------------------------

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # Skip trailers up to the terminating empty line.
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)  # CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        # RFC 9110: no Content-Length (and no body) on 1xx/204/304; every
        # other response carries an exact Content-Length so the connection
        # can be reused.
        if status in (204, 304) or status < 200:
            body = b""
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    # --- methods -----------------------------------------------------------

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/_health":
            self.reply(200, b"ok", [("Content-Type", "text/plain")])
        elif path == "/_count":
            body = json_bytes(self.state.snapshot())
            self.reply(200, body, [("Content-Type", "application/json")])
        elif path == "/_reset":
            self.state.reset()
            self.reply(200, b"ok", [("Content-Type", "text/plain")])
        else:
            self.reply(404, b'{"error":"not found"}', [("Content-Type", "application/json")])

    def do_POST(self):
        t = time.time()
        body = self.read_body()
        webhook_id = self.headers.get("webhook-id")
        attempt = self.state.count(self.path, webhook_id)

        headers = []
        try:
            b = parse_behaviour(self.path)
        except BadOptions as e:
            status = 400
            resp_body = json_bytes({"error": str(e)})
            headers.append(("Content-Type", "application/json"))
        else:
            failed = attempt <= b["fail_first"]
            status = b["fail_status"] if failed else b["status"]
            if b["retry_after"] is not None and (failed or status >= 400):
                headers.append(("Retry-After", b["retry_after"]))
            if 300 <= status < 400:
                headers.append(("Location", "/elsewhere"))
            if b["body"] is not None:
                resp_body = b["body"].encode()
                headers.append(("Content-Type", "text/plain; charset=utf-8"))
            elif status >= 400:
                resp_body = json_bytes({"error": reason_of(status).lower()})
                headers.append(("Content-Type", "application/json"))
            else:
                resp_body = b""
            if b["delay_ms"] and attempt <= b["delay_first"]:
                self._wait_unless_gone(b["delay_ms"] / 1000.0)

        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        # A client that gave up while the answer was being prepared (timed out) has closed
        # its end: the answer never reaches it.
        client_gone = self._client_gone()
        # Logged before the response is sent, so a client that got its
        # answer always finds its request in the log.
        self.state.write_log({
            "t": t,
            "path": self.path,
            "headers": self._joined_headers(),
            "body_b64": base64.b64encode(body).decode("ascii"),
            "body": text,
            "status": status,
            "attempt": attempt,
            "t_end": time.time(),
            "client_gone": client_gone,
            "peer": self.client_address[1],  # client port: one per connection
        })
        try:
            self.reply(status, resp_body, headers)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # client gave up (e.g. timed out)

    def _wait_unless_gone(self, seconds):
        """Sleeps `seconds`, or until the client closes its end (checked every 5 ms), so that
        t_end says when the client gave up on a delayed request."""
        deadline = time.time() + seconds
        while True:
            left = deadline - time.time()
            if left <= 0 or self._client_gone():
                return
            time.sleep(min(0.005, left))

    def _client_gone(self):
        """True when the client closed its end of the connection (nothing more to read and
        end of file): it will never see the answer."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _joined_headers(self):
        """Headers as {lowercased name: value}; repeated names are joined
        with ', ' as HTTP allows."""
        merged = {}
        for k, v in self.headers.items():
            k = k.lower()
            merged[k] = merged[k] + ", " + v if k in merged else v
        return merged

    def _not_allowed(self):
        self.reply(405, b'{"error":"method not allowed"}',
                   [("Allow", "POST, GET"), ("Content-Type", "application/json")])

    do_PUT = do_PATCH = do_DELETE = _not_allowed


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    address_family = socket.AF_INET
    allow_reuse_address = True
    request_queue_size = 128


def write_file_atomic(path, content):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def exit_with_parent():
    """SIGTERM when the process that started the sink exits, however it exits: a test that
    dies or forgets to stop its sink must not leave it running (and holding the fds it
    inherited, such as a root's lock file)."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the test's own cleanup stops it
    if os.getppid() == 1:  # the parent is gone already
        sys.exit(0)


def main():
    exit_with_parent()
    ap = argparse.ArgumentParser(description="Local webhook sink for outbox tests.")
    ap.add_argument("--port-file", required=True, help="file to receive the chosen port")
    ap.add_argument("--log", required=True, help="JSON-lines request log (appended)")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = ephemeral)")
    ap.add_argument("--bind", default="127.0.0.1", choices=BIND_ADDRESSES,
                    help="loopback address to listen on")
    ap.add_argument("--verbose", action="store_true", help="access log on stderr")
    args = ap.parse_args()

    Handler.state = State(args.log)
    Handler.verbose = args.verbose
    if args.bind == "::1":
        Server.address_family = socket.AF_INET6
    server = Server((args.bind, args.port), Handler)
    port = server.server_address[1]

    # Serve from a thread; the main thread just waits for SIGTERM/SIGINT.
    # The signals are blocked before any thread starts, so they are always
    # taken by sigwait() here, whichever thread the kernel picks.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    serving = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    serving.start()

    write_file_atomic(args.port_file, "%d\n" % port)
    print("ready port=%d" % port, flush=True)

    signal.sigwait(stop_signals)
    server.shutdown()  # returns once serve_forever() has stopped
    server.server_close()
    with Handler.state.lock:
        Handler.state.log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
