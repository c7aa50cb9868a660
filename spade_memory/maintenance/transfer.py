"""Export and import of one agent's memory as a JSON-ready dict.

:func:`export_memory` gives everything an agent remembers (its memories and its
conversation notes) under a format tag and a version; :func:`import_memory`
adds such an export, of any agent, to a memory. Import is idempotent: memories
whose ``uid`` is already present are skipped. The document is described by the
strict pydantic models :class:`ExportDocument`, :class:`ExportedMemory` (with its
:class:`ExportedScope`) and :class:`ExportedNote`: an import is parsed through them
(a value of the wrong type anywhere is refused, naming it), and an export is
checked by them before it is given out, so what is written is what import reads.
A memory's scope travels with it; an export made before scopes has none, and its
memories import as global (as they were seen before).

Version 2 adds the kept conversations (:class:`ExportedConversation`): each with its
partner and its messages (:class:`ExportedMessage`: role, sender, text, time, XMPP
id, and whether it was formed into memories where it was exported), and a memory
formed from them carries its sources (:class:`ExportedSource`), so that after an
import its messages still show where it came from and forgetting the conversation
still forgets it. Version 1 exports, which have none, still import.

Version 3 adds, to a memory with atoms marked forgotten (:meth:`MemoryManager.forget_atom
<spade_memory.manager.MemoryManager.forget_atom>`), their texts
(``forgotten_atoms``): the memory's atoms are derived again where it is imported,
and those are marked forgotten there too, so a forgotten part of a memory does not
come back with an import. The command-line ``export``
and ``import`` commands and the ``spade_llm`` backend are built on these.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import Field, ValidationError, field_validator

from ..config import MemoryConfig
from ..documents import Document, Text, Time, describe
from ..engine.memory_input import MemoryInput, check_jid, check_sender
from ..errors import InvalidToolInput
from ..identity import MAX_JID_CHARS
from ..limits import LIMITS
from ..storage.base import IndexedText, NewMemory
from ..storage.conversations import ImportedSource
from ..storage.derivation import Deferred
from ..storage.interaction import check_imported_notes
from ..text.extraction import check_graph_input, get_extractor
from ..text.graph import MemoryGraph
from ..validation import check_optional_text, check_text

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = [
    "EXPORT_FORMAT",
    "ExportDocument",
    "ExportedConversation",
    "ExportedMemory",
    "ExportedMessage",
    "ExportedNote",
    "ExportedScope",
    "ExportedSource",
    "Imported",
    "check_export",
    "export_memory",
    "import_export",
    "import_memory",
    "parse_export",
]

EXPORT_FORMAT: Final = "spade_memory.export"
_EXPORT_VERSION = 3
_PLAIN_VERSION = 2  # what an export without forgotten atoms says: older readers take it
_READ_VERSIONS = (1, 2, 3)  # 1: before conversations; 2: before forgotten atoms
_IMPORT_STEP = 250  # memories checked and extracted between two progress reports


class ExportedScope(Document):
    """Who a memory of an export belongs to and who may see it (see ``Scope``)."""

    owner: Text | None = None
    visibility: Literal["global", "private", "shared", "conversation"] = "global"
    shared_with: list[Text] = Field(default_factory=list)


class ExportedSource(Document):
    """A message a memory was formed from (``formed``) or told again by.

    ``message`` is its position among its conversation's exported messages; ``None``
    when retention had dropped it before the export (the memory still came from
    that conversation).
    """

    conversation_id: Text
    message: Annotated[int, Field(ge=0)] | None = None
    formed: bool = True


class ExportedMemory(Document):
    """One memory of an export: every field of :meth:`Memory.to_dict`, in its order.

    Only ``content`` is required; an absent ``uid`` gets a new one, absent times
    are the time of the import. ``id`` is the exporting memory's own and is ignored.
    """

    id: int | None = None
    uid: Annotated[Text, Field(max_length=64)] | None = None
    category: Text = "fact"
    content: Text
    context: Text | None = None
    confidence: float = 1.0
    importance: float = 0.5
    status: Literal["active", "archived"] = "active"
    source_conversation: Text | None = None
    source_sender: Text | None = None
    created_at: Time | None = None
    updated_at: Time | None = None
    last_accessed: Time | None = None
    access_count: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0  # an SQLite integer
    metadata: dict[Text, Any] | None = None
    scope: ExportedScope | None = None
    """Absent in exports made before scopes: the memory is global."""
    sources: list[ExportedSource] | None = None
    """The kept messages it came from; absent when it came from none (and in exports
    made before sources were exported)."""
    forgotten_atoms: list[Text] | None = None
    """The texts of its atoms marked forgotten; absent when none is (and in exports
    before version 3)."""
    entities: list[Text] | None = None
    """The entity names its ``store`` call named (``store(entities=...)``); absent when
    it named none (and in exports made before they were exported)."""
    relations: list[dict[Text, Text]] | None = None
    """The ``{source, relation, target}`` relations its ``store`` call named."""


class ExportedNote(Document):
    """One interaction note of an export."""

    content: Text
    author: Text | None = None
    created_at: Time


class ExportedMessage(Document):
    """One kept message of a conversation in an export.

    ``formed``: it was formed into memories where it was exported (or set aside by
    a reset, never to be formed); an import does not form it again.
    ``before_reset``: it came before the conversation's last reset where it was
    exported; an import keeps it without replaying it (absent before it was
    exported: an older reader replays it).
    """

    role: Literal["user", "assistant"]
    sender: Text
    text: Text
    at: Time
    message_id: Text | None = None
    formed: bool = False
    before_reset: bool = False


class ExportedConversation(Document):
    """One kept conversation of an export: its id, its partner and its messages,
    oldest first."""

    conversation_id: Text
    peer: Text
    messages: list[ExportedMessage] = Field(default_factory=list)


class ExportDocument(Document):
    """A whole export: format tag, version, the exporting agent, memories, notes and
    (from version 2) kept conversations."""

    format: Literal["spade_memory.export"]
    version: int
    agent: Text | None = None
    memories: list[ExportedMemory] = Field(default_factory=list)
    notes: dict[Text, list[ExportedNote]] = Field(default_factory=dict)
    conversations: list[ExportedConversation] = Field(default_factory=list)
    """Absent in version 1 exports."""

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version not in _READ_VERSIONS:
            known = " and ".join(str(v) for v in _READ_VERSIONS)
            raise ValueError(f"unsupported export version (this reads versions {known})")
        return version


def parse_export(data: object) -> ExportDocument:
    """Check an export (a dict as :func:`export_memory` gives, e.g. read from JSON).

    Raises:
        InvalidToolInput: it is not an export, naming what is wrong.
    """
    if isinstance(data, Mapping) and not isinstance(data, dict):
        data = dict(data)
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise InvalidToolInput(f"not a spade_memory export (format must be {EXPORT_FORMAT!r})")
    try:
        return ExportDocument.model_validate(data)
    except ValidationError as exc:
        raise InvalidToolInput(f"the export is invalid: {describe(exc)}") from None


def check_export(
    data: object, config: MemoryConfig, *, clock: Callable[[], float] = time.time
) -> ExportDocument:
    """Check an export as :func:`import_memory` would into a memory kept with
    ``config``, without that memory: every memory (as ``store`` checks it), source,
    conversation and note. Writes nothing and opens nothing, so that a command can
    refuse an export before it creates the memory it goes into.

    What only the memory can tell is left to :func:`import_memory` (a conversation
    kept there already with another partner), which refuses it before writing too.

    Raises:
        InvalidToolInput: it is not an export, or a part of it is invalid (naming
            it, counted from 1).
    """
    document = parse_export(data)
    _check_sources(document)
    for number, conversation in enumerate(document.conversations, 1):
        _conversation_fields(number, conversation)
    check_imported_notes(_notes_of(document), max_note_chars=config.max_note_chars, clock=clock)
    memory_input = MemoryInput(config, get_extractor())
    for number, exported in enumerate(document.memories, 1):
        _imported(number, exported, memory_input, clock)
    return document


async def export_memory(engine: Engine) -> dict[str, Any]:
    """Everything the engine's agent remembers, as a JSON-ready dict."""
    memories = [memory.to_dict() async for memory in engine.base.iter_all()]
    history = await engine.conversations.export()
    await engine.derived()  # atoms forgotten before their memory's derivation ran
    forgotten = await engine.atoms.forgotten_texts()
    given = await engine.base.given(memory["id"] for memory in memories)
    for memory in memories:
        if memory["id"] in history.sources:
            memory["sources"] = history.sources[memory["id"]]
        if memory["id"] in forgotten:
            memory["forgotten_atoms"] = forgotten[memory["id"]]
        entities, relations = given.get(memory["id"], ((), ()))
        if entities:
            memory["entities"] = list(entities)
        if relations:
            memory["relations"] = [dict(relation) for relation in relations]
    document = {
        "format": EXPORT_FORMAT,
        # version 3 only when a memory carries forgotten atoms, which older readers refuse
        "version": _EXPORT_VERSION if forgotten else _PLAIN_VERSION,
        "agent": engine.jid,
        "memories": memories,
        "notes": await engine.interactions.export(),
        "conversations": history.conversations,
    }
    parse_export(document)  # what is given out is what import reads
    return document


@dataclasses.dataclass(frozen=True, slots=True)
class Imported:
    """What :func:`import_export` did.

    Attributes:
        memories: memories added (new ones, not those held already or reinforced).
        notes: notes added.
        held: for each memory of the export with a uid, the uid of the memory that
            holds it here: its own (added now or before), or that of the copy it
            reinforced.
    """

    memories: int
    notes: int
    held: dict[str, str]


async def import_memory(
    data: Mapping[str, Any],
    engine: Engine,
    *,
    progress: Callable[[int, int], object] | None = None,
) -> tuple[int, int]:
    """:func:`import_export`, as ``(memories added, notes added)``."""
    imported = await import_export(data, engine, progress=progress)
    return imported.memories, imported.notes


async def import_export(
    data: Mapping[str, Any],
    engine: Engine,
    *,
    progress: Callable[[int, int], object] | None = None,
) -> Imported:
    """Add memories, notes and kept conversations from :func:`export_memory` output
    of any agent.

    Memories whose ``uid`` already exists are skipped, and so are messages kept
    already (see :meth:`ConversationStore.import_messages
    <spade_memory.storage.conversations.ConversationStore.import_messages>`), so
    importing twice changes nothing. A memory that copies one held here (the same
    content, as ``store`` compares them) reinforces it instead of being added.
    Counts the new ones only, neither those skipped nor those that reinforced a
    memory held here (see :class:`Imported`).

    Args:
        data: the export.
        engine: the memory it goes into (each memory is checked as ``store`` would).
        progress: called with ``(memories read, memories in the export)`` as they
            are checked and their graphs extracted (before the one transaction
            that adds them all).

    Everything is checked (every memory, note, conversation and source) before
    the first write.

    Raises:
        InvalidToolInput: the data is not an export, or a memory, note or
            conversation in it is invalid (naming it, counted from 1); nothing was
            written.
    """
    document = parse_export(data)
    conversations = await _checked_conversations(document.conversations, engine)
    _check_sources(document)
    notes = engine.interactions.check_import(_notes_of(document))
    prepared: list[tuple[NewMemory, IndexedText]] = []
    graphs: list[MemoryGraph | Deferred | None] = []
    explicit: list[tuple[Any, Any]] = []  # the entities and relations named at store
    seen: set[str] = set()
    held: dict[str, str] = {}
    forgotten_atoms: dict[str, list[str]] = {}  # uid -> texts of its forgotten atoms
    total = len(document.memories)
    for start in range(0, total, _IMPORT_STEP):
        step: list[tuple[NewMemory, IndexedText]] = []
        for position in range(start, min(start + _IMPORT_STEP, total)):
            new = _imported(position + 1, document.memories[position], engine.input, engine.now)
            text = engine.input.index_text(new.content, new.context)
            if new.uid in seen:
                continue
            holder = await engine.base.holder_of_uid(new.uid)
            if holder is not None:  # imported before (or a copy it reinforced, merged)
                held[new.uid] = holder.uid
                continue
            seen.add(new.uid)
            step.append((new, text))
            exported = document.memories[position]
            explicit.append((exported.entities, exported.relations))
            if exported.forgotten_atoms:
                forgotten_atoms[new.uid] = exported.forgotten_atoms
        graphs.extend(
            await engine.input.graphs_for(
                [new for new, _ in step], explicit[len(prepared) : len(prepared) + len(step)]
            )
        )
        prepared.extend(step)
        if progress is not None:
            progress(min(start + _IMPORT_STEP, total), total)
    # Atoms start their lives now: an export does not carry them, and an old
    # memory moved to a new host should not arrive already expired.
    written = await engine.base.insert_many(prepared, graphs=graphs, graph_time=engine.now())
    if written:
        engine.notify_changed(marked=True)
    # A copy of a memory held here (or of one earlier in the export) reinforces that
    # memory, which comes back in its place with its own uid: it is not a new one.
    added = 0
    forgotten: dict[int, list[str]] = {}  # new memory id -> texts of atoms to forget
    for (new, _), memory in zip(prepared, written, strict=True):
        held[new.uid] = memory.uid
        added += memory.uid == new.uid
        if memory.uid == new.uid and forgotten_atoms.get(new.uid):
            forgotten[memory.id] = forgotten_atoms[new.uid]
    if forgotten:
        # what was forgotten of a memory stays forgotten once its atoms are derived here
        await engine.derived()
        if await engine.atoms.forget_texts(forgotten):
            engine.notify_changed()
    notes_added = await engine.interactions.add_imported(notes) if notes else 0
    if conversations:
        # a conversation id as checked here, by its spelling in the export
        ids = {
            exported.conversation_id: str(checked["conversation_id"])
            for exported, checked in zip(document.conversations, conversations, strict=True)
        }
        sources = await _imported_sources(document.memories, ids, engine)
        await engine.conversations.import_messages(conversations, sources)
    return Imported(added, notes_added, held)


def _notes_of(document: ExportDocument) -> dict[str, list[dict[str, Any]]]:
    """The notes of an export as the interaction store imports them."""
    return {
        conversation: [note.model_dump() for note in notes]
        for conversation, notes in document.notes.items()
    }


def _check_sources(document: ExportDocument) -> None:
    """Every source names a conversation of the export and one of its messages.

    Raises:
        InvalidToolInput: one does not, naming the memory.
    """
    sizes = {c.conversation_id: len(c.messages) for c in document.conversations}
    for number, memory in enumerate(document.memories, 1):
        for source in memory.sources or ():
            size = sizes.get(source.conversation_id)
            if size is None:
                raise InvalidToolInput(
                    f"memory {number} of the export is invalid: its source names "
                    f"conversation {source.conversation_id!r}, which the export does not hold"
                )
            if source.message is not None and source.message >= size:
                raise InvalidToolInput(
                    f"memory {number} of the export is invalid: its source names message "
                    f"{source.message} (counted from 0) of conversation "
                    f"{source.conversation_id!r}, which holds {size}"
                )


async def _imported_sources(
    memories: list[ExportedMemory], conversation_ids: Mapping[str, str], engine: Engine
) -> list[ImportedSource]:
    """The sources of the exported memories, each with its memory's id here (added by
    this import or present already with the same ``uid``) and its conversation's id
    as checked (``conversation_ids``)."""
    found: list[ImportedSource] = []
    for memory in memories:
        if not memory.sources or memory.uid is None:
            continue
        here = await engine.base.holder_of_uid(memory.uid)
        if here is None:
            continue
        found.extend(
            ImportedSource(
                memory_id=here.id,
                conversation_id=conversation_ids[source.conversation_id],
                message=source.message,
                formed=source.formed,
            )
            for source in memory.sources
        )
    return found


async def _checked_conversations(
    conversations: list[ExportedConversation], engine: Engine
) -> list[dict[str, Any]]:
    """The conversations of an export, checked as ``history.append`` checks a message
    (JIDs normalised), ready for the store.

    Raises:
        InvalidToolInput: one is invalid, or its id is kept here already with another
            partner (naming which).
    """
    checked: list[dict[str, Any]] = []
    for number, conversation in enumerate(conversations, 1):
        fields = _conversation_fields(number, conversation)
        conversation_id, peer = fields["conversation_id"], fields["peer"]
        kept = await engine.conversations.info(conversation_id)
        if kept is not None and kept.peer != peer:
            raise InvalidToolInput(
                f"conversation {number} of the export is invalid: {conversation_id!r} is kept "
                f"here already as a conversation with {kept.peer}, not {peer}"
            )
        checked.append(fields)
    return checked


def _conversation_fields(number: int, conversation: ExportedConversation) -> dict[str, Any]:
    """Conversation ``number`` of an export (counted from 1), checked as
    ``history.append`` checks a message.

    Raises:
        InvalidToolInput: a field is invalid, naming the conversation.
    """
    try:
        return _checked_conversation(conversation)
    except InvalidToolInput as exc:
        raise InvalidToolInput(f"conversation {number} of the export is invalid: {exc}") from None


def _checked_conversation(conversation: ExportedConversation) -> dict[str, Any]:
    conversation_id = check_text(
        "conversation_id", conversation.conversation_id, max_chars=LIMITS.conversation_id_chars
    )
    peer = check_jid("peer", conversation.peer)
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(conversation.messages):
        where = f"messages[{index}]"
        messages.append(
            {
                "role": message.role,
                "sender": check_jid(f"{where}.sender", message.sender),
                "text": check_text(f"{where}.text", message.text, max_chars=LIMITS.message_chars),
                "at": float(message.at),
                "message_id": check_optional_text(
                    f"{where}.message_id", message.message_id, max_chars=LIMITS.message_id_chars
                ),
                "formed": message.formed or message.before_reset,
                "before_reset": message.before_reset,
            }
        )
    return {"conversation_id": conversation_id, "peer": peer, "messages": messages}


def _imported(
    number: int, exported: ExportedMemory, memory_input: MemoryInput, clock: Callable[[], float]
) -> NewMemory:
    """Memory ``number`` of an export (counted from 1), checked as ``store`` checks
    it, keeping its uid, status, times and access statistics.

    Raises:
        InvalidToolInput: it is invalid, naming it.
    """
    try:
        return _checked_memory(exported, memory_input, clock)
    except (InvalidToolInput, ValueError) as exc:
        raise InvalidToolInput(f"memory {number} of the export is invalid: {exc}") from None


def _carried_sender(sender: str | None) -> str | None:
    """An exported memory's sender: a JID normalised as ``store`` normalises it; a
    text that is none (earlier versions stored any) is kept as it was written."""
    try:
        return check_sender(sender)
    except InvalidToolInput:
        return check_optional_text("source_sender", sender, max_chars=MAX_JID_CHARS)


def _checked_memory(
    exported: ExportedMemory, memory_input: MemoryInput, clock: Callable[[], float]
) -> NewMemory:
    check_graph_input(exported.entities, exported.relations)
    new = memory_input.checked_memory(
        exported.content,
        category=exported.category,
        context=exported.context,
        confidence=exported.confidence,
        importance=exported.importance,
        source_conversation=exported.source_conversation,
        source_sender=None,  # carried as it was written: _carried_sender
        metadata=exported.metadata or {},
        scope=None if exported.scope is None else exported.scope.model_dump(),
        now=clock() if exported.created_at is None else exported.created_at,
    )
    return dataclasses.replace(
        new,
        uid=exported.uid or new.uid,
        source_sender=_carried_sender(exported.source_sender),
        status=exported.status,
        updated_at=new.created_at if exported.updated_at is None else exported.updated_at,
        last_accessed=exported.last_accessed,
        access_count=exported.access_count,
        # a copy of a memory held here reinforces it; copies within the export that
        # name their uid were kept apart where it was made, and stay apart (those
        # without, as store_many's items, make one); an archived one is kept as is
        dedupe=exported.status == "active",
        held_copies_only=exported.uid is not None,
    )
