"""A store's calls in a loop, one JSON line per call: run by test_partitions.py inside a network namespace
whose link to Postgres the test takes down.

    python partition_probe.py DSN SCHEMA SECONDS

Each call is one turn of the conversation ``probe`` appending the event ``e<n>``. A line says how it ended
(``ok``, or the error's class and whether it is retryable; ``UNTYPED:...`` for an exception outside the
pgagentstate hierarchy), when it started (``time.monotonic()``, the same clock as the test's) and how long
it took. The first line is ``{"ready": true}``, printed once a turn has succeeded.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from pgagentstate import AsyncStateStore, PgAgentStateError


async def main(dsn: str, schema: str, seconds: float) -> None:
    async with AsyncStateStore(dsn, schema=schema, min_size=1, max_size=2) as store:
        async with store.turn("probe", create=True) as turn:
            turn.append({"n": 0}, event_id="e0")
        print(json.dumps({"ready": True}), flush=True)
        stop = time.monotonic() + seconds
        n = 0
        while time.monotonic() < stop:
            n += 1
            started = time.monotonic()
            out: dict[str, Any] = {"n": n}
            try:
                async with store.turn("probe") as turn:
                    turn.append({"n": n}, event_id=f"e{n}")
                out["ok"] = True
            except PgAgentStateError as exc:
                out.update(error=type(exc).__name__, retryable=exc.retryable, message=str(exc)[:300])
            except Exception as exc:
                out.update(error=f"UNTYPED:{type(exc).__name__}", retryable=False, message=str(exc)[:300])
            out.update(started=started, seconds=time.monotonic() - started)
            print(json.dumps(out), flush=True)
            await asyncio.sleep(0.05 if out.get("ok") else 0.2)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
