"""Runs test/tools/webhook_sink.py listening on all of the container's interfaces.

The sink binds 127.0.0.1, as a test tool on a shared machine should; in the compose demo the
PostgreSQL container must reach it over the compose network. Only the bind address changes:
arguments, behaviour by path, log format and control endpoints are the sink's own (see
test/tools/README.md). Expects the sink mounted next to this file.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import webhook_sink  # noqa: E402  (found through the path set just above)


class AllInterfaces(webhook_sink.Server):
    def __init__(self, address, handler):
        super().__init__(("0.0.0.0", address[1]), handler)


# main() looks the class up by name when it creates the server.
webhook_sink.Server = AllInterfaces

if __name__ == "__main__":
    sys.exit(webhook_sink.main())
