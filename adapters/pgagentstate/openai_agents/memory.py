"""Long-term memory for Agents SDK agents: remember / recall / forget tools and instruction injection.

Memories live in the core's long-term memory (``put_memory`` / ``search_memory`` / ``delete_memory``) under
``(*namespace, user_id)``, one item per topic holding a list of facts. The user (and tenant) come from the
run context (see :mod:`._identity`), never from the model, so one user's agent cannot read another's notes.

Writes are compare-and-swap on the memory's version: two conversations of the same user remembering facts
about the same topic at the same moment both keep their fact (the loser re-reads and retries).

Search is the core's: by the words of the query, and — when the store (or ``embed=`` here) has a memory
index — hybrid, by meaning too (each fact and the topic are embedded: :data:`MEMORY_FIELDS`), so
``recall("how do I get my money back")`` finds the "refund" topic. :func:`memory_instructions` puts the
most relevant memories into the instructions within a character (or token) budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from agents import Agent, FunctionTool, RunContextWrapper, function_tool
from agents.exceptions import UserError

from pgagentstate import AsyncStateStore, MemoryIndex
from pgagentstate.embedding import embedder_from_spec
from pgagentstate.errors import VersionConflict
from pgagentstate.models import Memory

from ._identity import identity_of

DEFAULT_NAMESPACE: tuple[str, ...] = ("openai_agents", "memories")
#: What an index embeds of a memory: its topic and each of its facts (an item ranks by the best one).
MEMORY_FIELDS = ("topic", "facts[*]")
_MAX_TOPIC = 200
_CAS_ATTEMPTS = 32

Instructions = str | Callable[[RunContextWrapper[Any], Agent[Any]], str | Awaitable[str]]


class _Scope:
    """Where one user's memories live: the tenant's store and ``(*namespace, user_id)``."""

    def __init__(self, store: AsyncStateStore, namespace: Sequence[str], user_id: str | None) -> None:
        self.store = store
        self.namespace = tuple(namespace)
        self.default_user = user_id
        self._tenants: dict[str, AsyncStateStore] = {}

    def resolve(self, ctx: RunContextWrapper[Any] | Any) -> tuple[AsyncStateStore, tuple[str, ...], str]:
        ident = identity_of(ctx)
        user = ident.user_id or self.default_user
        if not user:
            raise UserError(
                "pgagentstate memory needs the user's identity: run the agent with a context that has a "
                "`user_id` (e.g. Runner.run(agent, text, context=StateContext(user_id='u1')) or "
                "context={'user_id': 'u1'}), or pass user_id= to memory_tools()/memory_instructions()"
            )
        store = self.store
        if ident.tenant:
            store = self._tenants.get(ident.tenant) or self._tenants.setdefault(
                ident.tenant, self.store.with_context_tenant(ident.tenant)
            )
        return store, (*self.namespace, user), user


def topic_key(topic: str) -> str:
    """The memory key of a topic: case and spacing do not make two topics different."""
    key = " ".join(str(topic).lower().split())[:_MAX_TOPIC]
    if not key:
        raise ValueError("topic must not be empty")
    return key


def _facts(memory: Memory | None) -> list[str]:
    if memory is None:
        return []
    facts = memory.value.get("facts")
    return [f for f in facts if isinstance(f, str)] if isinstance(facts, list) else []


async def remember_fact(
    store: AsyncStateStore, namespace: Sequence[str], user_id: str, topic: str, fact: str, *,
    ttl: float | None = None, max_facts: int = 50,
) -> Memory:
    """Add ``fact`` under ``topic`` (versioned; concurrent writers never lose each other's facts)."""
    key = topic_key(topic)
    fact = fact.strip()
    if not fact:
        raise ValueError("fact must not be empty")
    for _ in range(_CAS_ATTEMPTS):
        current = await store.get_memory(namespace, key, refresh_ttl=False)
        facts = _facts(current)
        if fact in facts and current is not None:
            return current
        facts = [*facts, fact][-max_facts:]
        try:
            return await store.put_memory(
                namespace, key, {"topic": topic.strip(), "facts": facts}, ttl=ttl, user_id=user_id,
                expected_version=current.version if current is not None else 0,
            )
        except VersionConflict:
            continue  # someone else wrote this topic meanwhile: merge with their version
    raise VersionConflict(None, None, what=f"memory {key!r} (too many concurrent writers)")


async def forget_fact(
    store: AsyncStateStore, namespace: Sequence[str], user_id: str, topic: str, fact: str = "",
    *, ttl: float | None = None,
) -> bool:
    """Forget one fact of ``topic``, or the whole topic when ``fact`` is empty. True if anything went."""
    key = topic_key(topic)
    fact = fact.strip()
    if not fact:
        return await store.delete_memory(namespace, key)
    for _ in range(_CAS_ATTEMPTS):
        current = await store.get_memory(namespace, key, refresh_ttl=False)
        facts = _facts(current)
        if current is None or fact not in facts:
            return False
        try:
            await store.put_memory(
                namespace, key, {**current.value, "facts": [f for f in facts if f != fact]}, ttl=ttl,
                user_id=user_id, expected_version=current.version,
            )
            return True
        except VersionConflict:
            continue
    raise VersionConflict(None, None, what=f"memory {key!r} (too many concurrent writers)")


async def relevant_memories(
    store: AsyncStateStore, namespace: Sequence[str], user_id: str, query: str | None, *, limit: int,
) -> list[Memory]:
    """Memories most relevant to ``query`` first (by meaning and words with a memory index, else by
    words), topped up with the most recently updated ones."""
    found: list[Memory] = []
    if query and query.strip():
        found = await store.search_memory(namespace, query=query, user_id=user_id, limit=limit)
    if len(found) < limit:
        seen = {m.key for m in found}
        recent = await store.search_memory(namespace, user_id=user_id, limit=limit + len(found))
        found += [m for m in recent if m.key not in seen][: limit - len(found)]
    return [m for m in found if _facts(m)]


def format_memories(
    memories: Sequence[Memory], *, budget: int | None = None, length: Callable[[str], int] = len,
) -> str:
    """One line per topic: ``- topic: fact; fact``, most relevant first. With ``budget``, lines are added
    while the text stays within it (``length`` measures it: characters, or a tokenizer's count); a topic
    that does not fit whole keeps its newest facts that do."""
    lines: list[str] = []
    used = 0
    for m in memories:
        head = f"- {m.value.get('topic') or m.key}: "
        facts = _facts(m)
        line = head + "; ".join(facts)
        sep = 1 if lines else 0
        if budget is not None and used + sep + length(line) > budget:
            kept: list[str] = []
            for fact in reversed(facts):  # newest facts first
                trial = head + "; ".join([fact, *kept])
                if used + sep + length(trial) > budget:
                    break
                kept.insert(0, fact)
            if not kept:
                continue
            line = head + "; ".join(kept)
        lines.append(line)
        used += sep + length(line)
    return "\n".join(lines)


def memory_index(embed: Any, dims: int | None = None) -> MemoryIndex:
    """The :class:`~pgagentstate.MemoryIndex` these tools use for ``embed`` (an embedder or its name, see
    :func:`pgagentstate.embedding.embedder_from_spec`): topics and facts embedded."""
    if isinstance(embed, str):
        embed = embedder_from_spec(embed, dims=dims)
    dims = dims if dims is not None else getattr(embed, "dims", None)
    if not isinstance(dims, int):
        raise ValueError("pass dims= (the dimensions of the embeddings embed returns)")
    return MemoryIndex(dims=dims, embed=embed, fields=list(MEMORY_FIELDS))


def _indexed(store: AsyncStateStore, embed: Any, dims: int | None) -> AsyncStateStore:
    return store if embed is None else store.with_memory_index(memory_index(embed, dims))


def memory_tools(
    store: AsyncStateStore,
    *,
    namespace: Sequence[str] = DEFAULT_NAMESPACE,
    user_id: str | None = None,
    ttl: float | None = None,
    recall_limit: int = 5,
    max_facts_per_topic: int = 50,
    embed: Any = None,
    dims: int | None = None,
) -> list[FunctionTool]:
    """Function tools ``remember``, ``recall`` and ``forget`` over the user's long-term memory.

    The user comes from the run context (``context.user_id`` or ``context["user_id"]``; a ``tenant`` there
    selects the tenant); ``user_id=`` is the fallback for single-user applications.

    Args:
        store: The store holding the memories.
        namespace: Namespace prefix; the user id is appended to it.
        user_id: Fallback user when the run context has none.
        ttl: Seconds after which an unused memory expires (None: never).
        recall_limit: How many topics ``recall`` returns.
        max_facts_per_topic: Older facts of a topic are dropped beyond this many.
        embed: An embedder (LangChain ``Embeddings``, a callable, or a name such as ``"hash"``): facts are
            embedded as they are remembered and ``recall`` searches by meaning too. Without it, the store's
            own memory index is used if it has one, else words only.
        dims: The dimensions ``embed`` returns (not needed when the embedder has a ``dims`` attribute).
    """
    scope = _Scope(_indexed(store, embed, dims), namespace, user_id)

    async def remember(ctx: RunContextWrapper[Any], topic: str, fact: str) -> str:
        """Save a durable fact about the user for future conversations (preferences, contact details,
        order numbers, promises made). Facts accumulate under a short topic.

        Args:
            topic: A short topic such as "email", "preferred language" or "order 12345".
            fact: The fact to remember, as a complete sentence.
        """
        s, ns, user = scope.resolve(ctx)
        memory = await remember_fact(s, ns, user, topic, fact, ttl=ttl, max_facts=max_facts_per_topic)
        return f"Remembered. {format_memories([memory])[2:]}"

    async def recall(ctx: RunContextWrapper[Any], query: str) -> str:
        """Look up what is known about the user. Returns the best matching topics with their facts.

        Args:
            query: Words to look for, e.g. "email refund"; empty for the most recent memories.
        """
        s, ns, user = scope.resolve(ctx)
        found = await relevant_memories(s, ns, user, query, limit=recall_limit)
        return format_memories(found) if found else "No memories found."

    async def forget(ctx: RunContextWrapper[Any], topic: str, fact: str) -> str:
        """Forget something about the user: one fact of a topic, or the whole topic when fact is empty.

        Args:
            topic: The topic to forget from.
            fact: The exact fact to remove; an empty string removes the whole topic.
        """
        s, ns, user = scope.resolve(ctx)
        gone = await forget_fact(s, ns, user, topic, fact, ttl=ttl)
        return "Forgotten." if gone else "Nothing to forget."

    return [function_tool(f, failure_error_function=cast(Any, _tool_error)) for f in (remember, recall, forget)]


def _tool_error(ctx: RunContextWrapper[Any], error: Exception) -> str | None:
    """What the model sees when a memory tool fails; None makes the SDK raise instead.

    A missing user identity is the application's bug, not the model's: fail the run loudly. Bad arguments
    are the model's to fix, so it gets the reason; anything else (the database is away) is reported
    without details and the conversation goes on.
    """
    if isinstance(error, UserError):
        return None
    if isinstance(error, ValueError):
        return f"Memory tool error: {error}"
    return "Memory is unavailable right now; continue without it."


def memory_instructions(
    store: AsyncStateStore,
    instructions: Instructions,
    *,
    namespace: Sequence[str] = DEFAULT_NAMESPACE,
    user_id: str | None = None,
    limit: int = 5,
    header: str = "What you already know about this user (from earlier conversations):",
    budget: int | None = 2000,
    count_tokens: Callable[[str], int] | None = None,
    embed: Any = None,
    dims: int | None = None,
) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """Dynamic ``Agent(instructions=...)`` that appends the user's relevant memories to ``instructions``.

    Relevance: the memories nearest to the latest user message (by meaning and words with a memory index
    — the store's, or ``embed=``'s —, else by words) rank first, then the most recently updated ones,
    ``limit`` topics in all, within ``budget`` characters of memory lines (or tokens, with
    ``count_tokens``, e.g. ``lambda s: len(tiktoken_encoding.encode(s))``; None: no budget).
    ``instructions`` may itself be a string or a dynamic instructions callable.
    """
    scope = _Scope(_indexed(store, embed, dims), namespace, user_id)

    async def build(ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        if isinstance(instructions, str):
            base = instructions
        else:
            produced = instructions(ctx, agent)
            base = await produced if isinstance(produced, Awaitable) else produced
        s, ns, user = scope.resolve(ctx)
        found = await relevant_memories(s, ns, user, _latest_user_text(ctx), limit=limit)
        lines = format_memories(found, budget=budget, length=count_tokens or len)
        if not lines:
            return base
        return f"{base}\n\n{header}\n{lines}"

    return build


def _latest_user_text(ctx: RunContextWrapper[Any]) -> str | None:
    for item in reversed(ctx.turn_input or []):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return None


async def request_distill(session: Any) -> None:
    """After a run, wake the distillation workers for this :class:`PostgresSession`'s conversation
    (``pgagentstate.distill``): one NOTIFY, nothing extracted in the request. Facts land in the layout of
    :func:`memory_tools` (``("openai_agents", "memories", user)``), where ``recall`` and
    :func:`memory_instructions` find them."""
    await session.store.request_distill(session.session_id)
