#!/usr/bin/env python3
"""moto in server mode (moto[server], in the test venv: test/install_deps) on 127.0.0.1, for the
sqs kind's signature tests (test/tools/moto_node starts it). It is moto's own server (moto.server's
app, request handler and threads), with one addition: every request signed with AWS Signature
Version 4 is recorded as a JSON line in --log, {"target": X-Amz-Target, "scope": the credential
scope without the key id (date/region/service/aws4_request), "signed": the SignedHeaders list,
"token": whether X-Amz-Security-Token was sent, "status": the HTTP status answered}. moto
recomputes the signature over the headers the client says it signed, whichever they are; the
test reads the log to check that the ones AWS requires were among them.

Authentication is off when it starts (moto's INITIAL_NO_AUTH_ACTION_COUNT, unset: infinite);
`broker_client.py moto-auth --after 0` turns it on.

  moto_server.py --port P --log FILE
"""
import argparse
import json
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def recording(app, log):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if not auth.startswith("AWS4-HMAC-SHA256"):
            return app(environ, start_response)
        record = {
            "target": environ.get("HTTP_X_AMZ_TARGET"),
            "scope": auth.partition("Credential=")[2].partition(",")[0].partition("/")[2],
            "signed": auth.partition("SignedHeaders=")[2].partition(",")[0].strip().split(";"),
            "token": "HTTP_X_AMZ_SECURITY_TOKEN" in environ,
        }

        def start(status, headers, exc_info=None):
            record["status"] = int(status.split()[0])
            with lock:
                log.write(json.dumps(record) + "\n")
                log.flush()
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return wrapped


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    a = p.parse_args()
    app = DomainDispatcherApplication(create_backend_app)
    log = open(a.log, "a")
    run_simple("127.0.0.1", a.port, recording(app, log), threaded=True, use_reloader=False,
               request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
