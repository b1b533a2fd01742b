"""Which puts start a branch on purpose (stored as forks) and which continue their chain.

Two writers that loaded the same head and each save a child of it must not both win: the second gets
VersionConflict (PostgresSaver forks the thread silently). A run that loaded an older checkpoint on purpose
saves a child that starts a branch: time travel (``invoke(None, config)`` or a resume with a
``checkpoint_id``), ``update_state`` on an old checkpoint, a subgraph replaying under such a run.

The configs the saver returns are exactly PostgresSaver's, so what a run loaded cannot travel in them:
the saver remembers instead which checkpoints it returned for a read that named them (a ``checkpoint_id``
in the config) while they were not the head of their namespace. LangGraph's run loop loads a checkpoint it
time-travels to that way, and ``update_state`` too; a run that continues a thread loads its latest
checkpoint without naming it, so a child of that one stays linear.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from pgagentstate.ops.snapshots import Snapshot

#: Config key LangGraph's run loop sets on the configs it passes to the saver (its durability mode): a put
#: that carries it comes from a graph run, not from a direct call of the saver's API.
RUN_KEY = "__pregel_durability"
#: Config key of the replay state a time-travelling run hands its subgraphs (None when not replaying).
REPLAY_KEY = "__pregel_replay_state"


class ForkPoints:
    """The (thread, namespace, checkpoint) a read named while it was not the head; bounded, oldest
    forgotten first. The lock guards a dict for microseconds, never I/O."""

    def __init__(self, max_size: int = 10_000) -> None:
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self._max_size = max_size

    def read(self, snap: Snapshot | None, named: bool) -> None:
        if snap is None or not named or snap.is_head:
            return
        key = (snap.conversation_id, snap.namespace, snap.snapshot_id)
        with self._lock:
            self._seen[key] = None
            self._seen.move_to_end(key)
            while len(self._seen) > self._max_size:
                self._seen.popitem(last=False)

    def is_fork(self, thread_id: str, ns: str, config: RunnableConfig, metadata: Mapping[str, Any]) -> bool | None:
        """Whether a put starts a branch on purpose rather than continuing its chain.

        With a parent: LangGraph says so (``source="fork"``: the checkpoint a time-travelling run or a
        copy saves first), a subgraph replays under a time-travelling run, or a read named that parent
        while it was not the head. Without one, from a replaying subgraph: a branch (its namespace had no
        checkpoint before the replay point). Without one, from another graph run: the run found the thread
        empty, so its checkpoint claims the thread — a run's input checkpoint (step -1), or with
        ``durability="exit"`` the only one it saves — and of two first runs racing, one gets VersionConflict.
        Without one, from a direct call: it claims the thread if the thread is still empty and is a branch
        otherwise (None: the core decides when it writes).
        """
        conf = config.get("configurable") or {}
        if conf.get(REPLAY_KEY) is not None:
            return True
        parent = conf.get("checkpoint_id")
        if parent:
            if metadata.get("source") == "fork":
                return True
            with self._lock:
                return (thread_id, ns, str(parent)) in self._seen
        if metadata.get("step") == -1 or RUN_KEY in conf:
            return False
        return None
