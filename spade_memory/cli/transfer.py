"""``export`` and ``import``: an agent's memory as JSON lines, and back.

The file holds a header line, then one line per memory (every field, so an
import into another agent round-trips exactly), then one line per conversation's
notes::

    {"type": "header", "format": "spade_memory.export.jsonl", "agent": ..., ...}
    {"type": "memory", "uid": ..., "content": ..., "importance": ..., ...}
    {"type": "notes", "conversation": ..., "notes": [...]}

Each line is described by a strict pydantic model (:class:`HeaderLine`, a memory line
is an :class:`~spade_memory.maintenance.transfer.ExportedMemory` with its ``type``,
:class:`NotesLine`); a line of the wrong shape is refused naming the line and field.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO, TypeVar

from pydantic import ValidationError

from ..documents import Document, Text, describe
from ..errors import InvalidToolInput
from ..maintenance.transfer import (
    EXPORT_FORMAT,
    ExportedConversation,
    ExportedMemory,
    ExportedNote,
    check_export,
    parse_export,
)
from .common import (
    NotFound,
    command_config,
    embed_pending,
    memory_root,
    open_memory,
    plural,
    print_json,
    run_command,
    say,
    tell,
)
from .progress import ProgressLine

if TYPE_CHECKING:
    from ..identity import AgentIdentity
    from ..manager import MemoryManager

_Model = TypeVar("_Model", bound=Document)

__all__ = [
    "EXPORT_LINES_FORMAT",
    "HeaderLine",
    "NotesLine",
    "export",
    "export_lines",
    "import_",
    "parse_export_lines",
]

EXPORT_LINES_FORMAT: Final = "spade_memory.export.jsonl"


class HeaderLine(Document):
    """The first line: this file's format, the export's version and agent, counts.

    ``export_format`` is read from files written before the header carried one
    format field (it named the dict form, which ``format`` now implies).
    """

    type: Literal["header"]
    format: Literal["spade_memory.export.jsonl"]
    export_format: Literal["spade_memory.export"] | None = None
    version: int | None = None
    agent: Text | None = None
    memories: int | None = None
    conversations: int | None = None
    """How many conversations have notes."""
    messages: int | None = None
    """How many kept messages the conversation lines hold (version 2)."""


class _MemoryLine(ExportedMemory):
    type: Literal["memory"]


class _ConversationLine(ExportedConversation):
    type: Literal["conversation"]


class NotesLine(Document):
    """One conversation's notes."""

    type: Literal["notes"]
    conversation: Text
    notes: list[ExportedNote]


def export_lines(data: Mapping[str, Any]) -> Iterable[str]:
    """The JSON lines of a ``MemoryManager.export()`` dict: header, memories, notes,
    kept conversations."""
    parse_export(data)  # what is written is what import reads
    memories = list(data.get("memories", []))
    notes = dict(data.get("notes", {}))
    kept = list(data["conversations"]) if "conversations" in data else None
    header = HeaderLine(
        type="header",
        format=EXPORT_LINES_FORMAT,
        version=data.get("version"),
        agent=data.get("agent"),
        memories=len(memories),
        conversations=len(notes),
        messages=None if kept is None else sum(len(c.get("messages", [])) for c in kept),
    )
    left_out = {"export_format"} | ({"messages"} if kept is None else set())
    yield _json_line(header.model_dump(exclude=left_out))
    for memory in memories:
        yield _json_line({"type": "memory", **memory})
    for conversation, entries in notes.items():
        yield _json_line({"type": "notes", "conversation": conversation, "notes": entries})
    for conversation in kept or []:
        yield _json_line({"type": "conversation", **conversation})


# Characters that end a line for str.splitlines() and many editors, though JSON keeps
# them raw in a string: escaped, so that every line of the file is one item.
_LINE_BREAKS = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _check_counts(
    header: HeaderLine,
    memories: list[dict[str, Any]],
    notes: dict[str, Any],
    conversations: list[dict[str, Any]],
) -> None:
    """Refuse a file cut short (or added to): what the header counts was read.

    Raises:
        InvalidToolInput: a count of the header differs from the lines read.
    """
    messages = sum(len(c.get("messages", [])) for c in conversations)
    for what, counted, read in (
        ("memories", header.memories, len(memories)),
        ("conversations with notes", header.conversations, len(notes)),
        ("kept messages", header.messages, messages),
    ):
        if counted is not None and counted != read:
            raise InvalidToolInput(
                f"the export is not whole: its header counts {counted} {what}, its lines "
                f"hold {read} (a file cut short?); nothing was imported"
            )


def _json_line(item: Mapping[str, Any]) -> str:
    """One item as one line of JSON (UTF-8 text; line breaks inside strings escaped)."""
    return json.dumps(item, ensure_ascii=False).translate(_LINE_BREAKS)


def parse_export_lines(lines: Iterable[str]) -> dict[str, Any]:
    """Read :func:`export_lines` output back into the dict ``import_data`` takes.

    Each line is checked by its model; a memory keeps the keys its line gives.

    Raises:
        InvalidToolInput: a line is not JSON, or not a line of an export (naming
            the line and the field).
    """
    header: HeaderLine | None = None
    memories: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    conversations: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise InvalidToolInput(f"line {number} is not JSON ({reason})") from None
        kind = item.get("type") if isinstance(item, dict) else None
        if header is None:
            if kind != "header" or item.get("format") != EXPORT_LINES_FORMAT:
                raise InvalidToolInput(
                    f"line 1 is not a {EXPORT_LINES_FORMAT} header; write the file with "
                    "spade-memory export"
                )
            header = _line(HeaderLine, item, number)
        elif kind == "memory":
            _line(_MemoryLine, item, number)
            memories.append({k: v for k, v in item.items() if k != "type"})
        elif kind == "notes":
            notes_line = _line(NotesLine, item, number)
            notes[notes_line.conversation] = item["notes"]
        elif kind == "conversation":
            _line(_ConversationLine, item, number)
            conversations.append({k: v for k, v in item.items() if k != "type"})
        else:
            raise InvalidToolInput(f"line {number} is neither a memory, notes nor a conversation")
    if header is None:
        raise InvalidToolInput("the file is empty; it is not an export")
    _check_counts(header, memories, notes, conversations)
    data: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "version": header.version,
        "agent": header.agent,
        "memories": memories,
        "notes": notes,
    }
    if conversations or header.messages is not None:  # version 2
        data["conversations"] = conversations
    return data


def _line(model: type[_Model], item: dict[str, Any], number: int) -> _Model:
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        raise InvalidToolInput(f"line {number} is invalid: {describe(exc)}") from None


def export(args: argparse.Namespace) -> int:
    async def work() -> int:
        async with open_memory(args) as memory:
            data = await memory.export()
        if args.output is None:
            _write_stdout(export_lines(data))
        else:
            with open(args.output, "w", encoding="utf-8") as target:
                _write_lines(target, export_lines(data))
        kept = data.get("conversations", [])
        messages = sum(len(conversation["messages"]) for conversation in kept)
        history = f" and {plural(messages, 'message')} of {plural(len(kept), 'conversation')}"
        tell(
            f"exported {plural(len(data['memories']), 'memory')} of {data['agent']}"
            + (history if kept else "")
        )
        return 0

    return run_command(work)


def _write_lines(target: TextIO, lines: Iterable[str]) -> None:
    for line in lines:
        target.write(line + "\n")


def _write_stdout(lines: Iterable[str]) -> None:
    """Write ``lines`` to standard output as UTF-8 whatever the console's encoding
    (``export JID > file`` must give what ``import`` reads)."""
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:  # a text stream without bytes under it (redirected in Python)
        _write_lines(sys.stdout, lines)
        return
    sys.stdout.flush()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
    try:
        _write_lines(stdout, lines)
    finally:
        stdout.flush()
        stdout.detach()  # sys.stdout keeps the buffer


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _read_export(source: str) -> dict[str, Any]:
    """The export in ``source`` (a file, or ``-`` for stdin).

    Raises:
        NotFound: there is no such file.
        InvalidToolInput: the file is not an export, in one line saying what it is
            (spade_llm's memory files point to ``import-spade-llm``).
    """
    if source == "-":
        stdin = sys.stdin
        if stdin is None:  # the process was started with its input closed
            raise InvalidToolInput("there is no standard input to read the export from")
        data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
        name = "the input"
    else:
        path = Path(source).expanduser()
        if path.is_dir():
            raise InvalidToolInput(
                f"{path} is a folder; give the file spade-memory export wrote (a folder of "
                "spade_llm memory files is imported with: spade-memory import-spade-llm "
                f"{path})"
            )
        if not path.is_file():
            raise NotFound(f"there is no file {path}")
        data = path.read_bytes()
        name = str(path)
    if data.startswith(_SQLITE_MAGIC):
        raise InvalidToolInput(
            f"{name} is a SQLite database, not an export; spade_llm's memory files "
            "(*_base_memory.db, *_interactions.json) are imported with: "
            "spade-memory import-spade-llm THEIR_FOLDER"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidToolInput(
            f"{name} is not text (not UTF-8); give the file spade-memory export wrote"
        ) from None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            document = None  # JSON lines, or damaged: each line is checked below
        if isinstance(document, dict) and "memories" in document:
            return document  # the dict MemoryManager.export() gives, saved as one JSON
        if isinstance(document, dict) and "interactions" in document:
            raise InvalidToolInput(
                f"{name} holds spade_llm's interaction notes, not an export; import it "
                "with: spade-memory import-spade-llm THEIR_FOLDER"
            )
        if document is not None and not (isinstance(document, dict) and "type" in document):
            raise InvalidToolInput(
                f"{name} is JSON but not an export (no memories, and not the "
                f"{EXPORT_LINES_FORMAT} lines); give the file spade-memory export wrote"
            )
    # only "\n" ends a line: a text may hold other line breaks (older files raw)
    return parse_export_lines(text.split("\n"))


def import_(args: argparse.Namespace) -> int:
    """Import an export into the memory of ``args.jid``.

    The whole export is checked before anything is made; a memory (and root) this
    command made is removed again when the import then fails, so that no agent is
    left behind; an agent that was there is left as it was (its import writes
    nothing until everything was checked).
    """

    async def work() -> int:
        from ..identity import AgentIdentity
        from ..storage.file_peek import categories

        data = _read_export(args.file)
        root = memory_root(args, create=True)
        identity = AgentIdentity.of(args.jid)
        root_made = not root.exists()
        agent_made = root_made or _is_new(root, identity)
        # the memory's categories; a memory this import makes takes the export's too
        held = categories(root / identity.database_name)
        listed = data.get("memories") if isinstance(data, dict) else None
        told = (
            [m.get("category") for m in listed if isinstance(m, dict)]
            if isinstance(listed, list)
            else []
        )
        brought = [c for c in told if isinstance(c, str)] if agent_made else []
        longest = _longest_texts(data)  # an agent configured for longer texts made it
        check_export(
            data, command_config(root, None, categories=(*held, *brought), longest=longest)
        )
        try:
            async with open_memory(
                args, create=True, embeds=True, derives=True, categories=brought, longest=longest
            ) as memory:
                progress = ProgressLine("importing", enabled=not args.json)
                before = await _kept_messages(memory)
                added, notes = await memory.import_data(data, progress=progress)
                messages = await _kept_messages(memory) - before
                progress.finish()
                await embed_pending(memory, show=not args.json)
        except BaseException:
            if agent_made:
                _remove_made(root, identity, root_made=root_made)
            raise
        plan = args.embedder_plan
        # held here already: by uid, or as a copy that reinforced the memory here
        present = len(data.get("memories", [])) - added
        if args.json:
            print_json(
                {
                    "memories_added": added,
                    "memories_present": present,
                    "notes_added": notes,
                    "messages_added": messages,
                    "embedder": plan.choice,
                }
            )
        else:
            there = f" ({present:,} there already)" if present else ""
            say(
                f"imported {plural(added, 'new memory', 'new memories')}{there} and "
                f"{plural(notes, 'note')} into {args.jid} "
                f"(embedder: {plan.choice or 'none, keyword search only'})"
            )
            if messages:
                say(f"kept {plural(messages, 'conversation message')} more (spade-memory history)")
        return 0

    return run_command(work)


def _longest_texts(data: Any) -> tuple[int, int]:
    """The longest memory content and note text an export holds (0 when it holds none
    or is not one: checking it says what is wrong)."""
    if not isinstance(data, dict):
        return 0, 0
    memories = data.get("memories")
    notes = data.get("notes")
    contents = [
        len(m["content"])
        for m in (memories if isinstance(memories, list) else [])
        if isinstance(m, dict) and isinstance(m.get("content"), str)
    ]
    texts = [
        len(n["content"])
        for listed in (notes.values() if isinstance(notes, dict) else [])
        if isinstance(listed, list)
        for n in listed
        if isinstance(n, dict) and isinstance(n.get("content"), str)
    ]
    return max(contents, default=0), max(texts, default=0)


def _is_new(root: Path, identity: AgentIdentity) -> bool:
    """Whether ``root`` holds nothing of ``identity``'s memory: no database, and no
    trace of one (registry entry, notes, backups, files moved aside)."""
    from ..storage.registry import Registry
    from ..storage.traces import find_traces

    if (root / identity.database_name).exists():
        return False
    registered = Registry(root).registered(identity)
    return not find_traces(root, identity, registered=registered, listing=True)


def _remove_made(root: Path, identity: AgentIdentity, *, root_made: bool) -> None:
    """Remove the memory a failed import made (and its root, if it made that too)."""
    from ..errors import SpadeMemoryError
    from ..storage.agent_removal import remove_agent, remove_unused_root

    try:
        remove_agent(root, identity)
        if root_made:
            remove_unused_root(root)
    except (SpadeMemoryError, OSError) as exc:
        tell(f"warning: the memory of {identity.jid} this import made is left in {root}: {exc}")


async def _kept_messages(memory: MemoryManager) -> int:
    return sum(info.messages for info in await memory.history.conversations())
