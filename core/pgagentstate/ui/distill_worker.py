"""The distillation worker: ``python -m pgagentstate.ui.distill_worker [--dsn DSN] [--follow]`` (see
:mod:`pgagentstate.distill`). Runs beside the application, never in its requests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from ..connect import resolve_dsn
from ..distill import DISTILL_CHANNEL, Distiller, DistillResult
from ..sync import StateStore


class DistillWorker:
    """Distils every conversation whose log moved past its watermark; ``follow`` keeps doing it, woken by
    :meth:`~pgagentstate.StateStore.request_distill` (LISTEN) or every ``poll`` seconds. Several workers
    may run at once: ``run_once`` gives each position to one of them."""

    def __init__(
        self, store: StateStore, distiller: Distiller | None = None, *, batch: int = 50, poll: float = 2.0
    ) -> None:
        self.store = store
        self.distiller = distiller or Distiller()
        self.batch = batch
        self.poll = poll
        self.done = 0

    def run_pending(self) -> list[DistillResult]:
        """One pass over the pending conversations."""
        out = []
        for conversation_id in self.store.pending_distillations(self.batch):
            result = self.store.distill(conversation_id, self.distiller)
            if result is not None:
                out.append(result)
                self.done += 1
        return out

    def follow(self, dsn: str, *, stop: Callable[[], bool] = lambda: False) -> None:
        """Run passes until ``stop()``: after each, wait for a notification or ``poll`` seconds."""
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as listener:
            listener.execute(f"LISTEN {DISTILL_CHANNEL}")
            while not stop():
                if not self.run_pending():
                    for _ in listener.notifies(timeout=self.poll, stop_after=1):
                        pass


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pgagentstate.ui.distill_worker [--dsn DSN] [--schema S] [--tenant T] [--follow]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="pgagentstate.ui.distill_worker", description=main.__doc__)
    parser.add_argument("--dsn")
    parser.add_argument("--schema", default="pgagentstate")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--namespace", help="where facts go, e.g. 'memories/{user}' (default: per framework)")
    parser.add_argument("--follow", action="store_true", help="keep running, woken by request_distill")
    parser.add_argument("--poll", type=float, default=2.0)
    args = parser.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    with StateStore(dsn, schema=args.schema, tenant=args.tenant) as store:
        worker = DistillWorker(store, Distiller(namespace=args.namespace), poll=args.poll)
        if args.follow:
            with contextlib.suppress(KeyboardInterrupt):
                worker.follow(dsn)
        else:
            worker.run_pending()
        print(f"distilled {worker.done} conversation positions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
