"""One process of `dpsql serve --workers N` (`python -m dpsql.server.worker`). Its options, link
and the servers' shared secret arrive as one JSON line on standard input, never on the command
line or in the environment, where other processes could read the secret."""

from __future__ import annotations

import json
import sys

from ..errors import Error
from .launch import ServeOptions, build_server
from .listener import run
from .worker_link import WorkerLink


def main() -> int:
    spec = json.loads(sys.stdin.readline())
    link = WorkerLink.from_json(spec["link"])
    try:
        server = build_server(ServeOptions.from_json(spec["options"]), link, bytes.fromhex(spec["secret"]))
    except Error as e:
        print(f"ERROR [{e.sqlstate}]: worker {link.index}: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"HINT: {e.hint}", file=sys.stderr)
        return 1
    run(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
