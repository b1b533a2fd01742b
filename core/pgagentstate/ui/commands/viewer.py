"""``pgagentstate ui``: serve the timeline viewer (:mod:`pgagentstate.ui.server`) on a local port."""

from __future__ import annotations

import argparse
import sys

from .base import Add, idle_option, open_store


def cmd_ui(args: argparse.Namespace) -> int:
    from ..server import make_server

    store = open_store(args, max_size=4)
    with store:
        server = make_server(store, host=args.host, port=args.port, idle=args.idle)
        host, port = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        print(f"pgagentstate timeline viewer on http://{shown}:{port}/  (tenant {args.tenant!r}; Ctrl-C stops)")
        if not server.loopback:
            print(
                "warning: listening beyond loopback: anyone who reaches this port can read conversations",
                file=sys.stderr,
            )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


def register(add: Add) -> None:
    p = add("ui", cmd_ui, "serve the timeline viewer (a local web page)")
    p.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    idle_option(p)
