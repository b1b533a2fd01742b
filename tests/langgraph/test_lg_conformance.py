"""LangGraph's own conformance suite (PyPI ``langgraph-checkpoint-conformance``) against our saver.

The suite only calls the async API, and silently reports a sync-only saver as conformant with zero tests
run; so the sync API is run through a thin shim whose async methods call the sync ones. Every capability
must be detected (the optional delete_for_runs, copy_thread and prune included) and every check pass.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport
from psycopg_pool import ConnectionPool

from pgagentstate.langgraph import PostgresCheckpointer

_names = itertools.count()
#: 17 put, 10 put_writes, 10 get_tuple, 16 list, 5 delete_thread, 7 delete_for_runs, 8 copy_thread, 8 prune
EXPECTED_CHECKS = 81


class SyncShim(BaseCheckpointSaver[str]):
    """Exposes a saver's sync API under the async names the conformance suite calls."""

    def __init__(self, inner: PostgresCheckpointer) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for tup in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield tup

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)


def assert_full_conformance(report: CapabilityReport) -> None:
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    assert {name for name, r in report.results.items() if r.detected} == {c.value for c in ALL_CAPABILITIES}
    assert report.conformance_level() == "FULL"
    assert sum(r.tests_passed for r in report.results.values()) == EXPECTED_CHECKS
    assert sum(r.tests_failed for r in report.results.values()) == 0


async def test_async_api_is_fully_conformant(dsn: str, schema: str) -> None:
    async def factory() -> AsyncIterator[PostgresCheckpointer]:
        async with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as saver:
            yield saver

    registered = checkpointer_test(name=f"pgagentstate-async-{next(_names)}")(factory)
    assert_full_conformance(await validate(registered))


async def test_sync_api_is_fully_conformant(dsn: str, schema: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:

        async def factory() -> AsyncIterator[SyncShim]:
            # A sync pool only: the saver has no async store, so every call below runs the sync API.
            yield SyncShim(PostgresCheckpointer(pool, schema=schema))

        registered = checkpointer_test(name=f"pgagentstate-sync-{next(_names)}")(factory)
        assert_full_conformance(await validate(registered))


def test_shim_is_not_silently_skipped() -> None:
    # A saver with no async overrides is reported "FULL" with zero tests run; the shim overrides them all.
    from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities

    detected = DetectedCapabilities.from_instance(SyncShim(PostgresCheckpointer("postgresql://unused")))
    assert detected.missing == frozenset()


def _unused(_: Iterator[Any]) -> None:  # keeps the Iterator import honest for type checkers
    return None
