"""Every size and count limit of the memory, in one table.

The tools, the manager, the sharing protocol and the configuration's defaults all
read :data:`LIMITS`; no limit is written down a second time anywhere. Where a value
is checked in several layers (a tool call, then the manager it calls), every layer
uses the same number, so a call the tool accepts is never refused further down.

```python
from spade_memory.limits import LIMITS

LIMITS.query_chars   # 1000: the longest search query, everywhere
```
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LIMITS", "Limits"]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The limits, each with the reason for its value.

    Attributes:
        query_chars: a search query (tools, manager, memory queries over XMPP); a
            query is a few key words, longer text is a document pasted by mistake.
        content_chars: default longest memory content (``MemoryConfig.max_content_chars``);
            a memory is one statement, and long ones dilute keyword and vector scores.
        configurable_chars: the most ``max_content_chars`` and ``max_note_chars`` may be
            set to; beyond it one row outgrows what a prompt can ever show.
        context_chars: a memory's ``context`` (where or why it was learned), in the tool
            and in the manager alike; a short note, not a second content.
        note_chars: default longest interaction note (``MemoryConfig.max_note_chars``);
            every note of a conversation is recalled into each prompt.
        conversation_id_chars: a conversation id (an XMPP thread or a derived id).
        jid_chars: a JID: three parts of at most 1023 bytes each plus two separators
            (RFC 7622).
        category_chars: a category name; it is an identifier, not a sentence.
        tool_search_limit: results of one ``search_memories`` or ``ask_agent_memory`` call;
            more would crowd the LLM's context.
        search_limit: results of one ``MemoryManager.search`` or one memory query over
            XMPP (and so the most an answer may hold).
        tool_list_limit: memories one ``list_memories`` call shows.
        list_limit: memories of one ``MemoryManager.list`` page.
        explicit_entities: entities a store may name besides those found in the text
            (and as many relations); the graph keeps a few per memory, not a document.
        entity_chars: one explicit entity name or relation part.
        argument_text_chars: the JSON text of one tool call's arguments.
        argument_depth: nesting of one tool call's arguments or one protocol body
            (objects and arrays); the deepest valid input needs 4, and a bounded depth
            keeps every check free of deep recursion.
        argument_items: values (of any kind, at any depth) in one tool call's arguments;
            the largest valid call holds about 200.
        body_chars: the JSON body of one memory-sharing message; XMPP servers refuse
            stanzas far smaller than memory could produce.
        answer_bytes: the most ``SharingConfig.max_answer_bytes`` may be set to.
        min_answer_bytes: the least it may be set to: one result must still fit.
        shared_content_chars: the most ``SharingConfig.max_content_chars`` may be set to.
        min_shared_content_chars: the least it may be set to, and the shortest a result
            of an answer is cut to before it is left out.
        reason_chars: the reason of a refusal or failure over XMPP.
        uid_chars: a memory's uid in a share (a hex UUID is 32).
        provenance_fields: fields of one result's provenance in an answer.
        omitted_results: results an answer may say it left out.
        metadata_chars: a memory's metadata, as JSON text.
        scope_readers: the readers of one shared memory besides its owner.
        message_chars: one conversation message kept in the conversation store; the
            largest body an XMPP server passes on, with room to spare.
        message_id_chars: an XMPP message id kept with a message (clients use a few
            dozen characters; a longer one is no id of theirs).
        graph_view_nodes: entities one look at the whole graph shows
            (``MemoryManager.graph_overview``); a drawing of more is a hairball.
        latest_time: the latest time a memory, note or message may carry (seconds
            since the epoch: 9999-12-30 UTC), the last that Python's dates show in
            every time zone; an earlier one than 0 (1970) is refused too.
    """

    query_chars: int = 1_000
    content_chars: int = 8_000
    configurable_chars: int = 1_000_000
    context_chars: int = 2_000
    note_chars: int = 4_000
    conversation_id_chars: int = 512
    jid_chars: int = 3_071
    category_chars: int = 40
    tool_search_limit: int = 20
    search_limit: int = 100
    tool_list_limit: int = 50
    list_limit: int = 1_000
    explicit_entities: int = 32
    entity_chars: int = 200
    argument_text_chars: int = 4_000_000
    argument_depth: int = 16
    argument_items: int = 10_000
    body_chars: int = 400_000
    answer_bytes: int = 200_000
    min_answer_bytes: int = 1_024
    shared_content_chars: int = 100_000
    min_shared_content_chars: int = 20
    reason_chars: int = 500
    uid_chars: int = 64
    provenance_fields: int = 16
    omitted_results: int = 1_000_000
    metadata_chars: int = 64_000
    scope_readers: int = 100
    message_chars: int = 100_000
    message_id_chars: int = 256
    graph_view_nodes: int = 400
    latest_time: float = 253_402_128_000.0


LIMITS = Limits()
"""The limits in force (a frozen table; read, never changed)."""
