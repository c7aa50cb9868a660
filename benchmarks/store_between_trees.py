"""Single-store p50 of one source tree, for comparing two trees side by side.

    python -m benchmarks.store_between_trees --tree DIR                # copies reinforce
    python -m benchmarks.store_between_trees --tree DIR --no-dedupe    # dedupe=False

Imports ``spade_memory`` from ``--tree`` (a checkout of any commit; an editable
install's finder is set aside so that it does not win), stores 1,000 memories in one
batch, then times ``--stores`` single stores (``synchronous=FULL``, no embedder) and
prints their median. Run two trees alternately and compare the ratios of one session.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import tempfile
import time
from typing import Any


def load(tree: str) -> Any:
    """``spade_memory`` as found in ``tree``."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, tree)
    return importlib.import_module("spade_memory")


async def median_store_ms(memory_package: Any, stores: int, dedupe: bool) -> float:
    with tempfile.TemporaryDirectory() as folder:
        config = memory_package.MemoryConfig(root=folder, embedder=None)
        manager = await memory_package.MemoryManager.open("bench@localhost", config)
        async with manager as memory:
            await memory.store_many(
                [{"content": f"Prefill memory {i} about topic {i % 37}"} for i in range(1000)]
            )
            extra = {} if dedupe else {"dedupe": False}
            times = []
            for i in range(stores):
                began = time.perf_counter()
                text = f"Database {i} rotates its password every {i % 30} days"
                await memory.store(text, **extra)
                times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", required=True, help="the source tree to import")
    parser.add_argument("--stores", type=int, default=300)
    parser.add_argument("--no-dedupe", action="store_true", help="store with dedupe=False")
    args = parser.parse_args(argv)
    package = load(args.tree)
    ms = asyncio.run(median_store_ms(package, args.stores, dedupe=not args.no_dedupe))
    print(f"{args.tree}: single store p50 {ms:.2f} ms ({package.__file__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
