"""The argument models of the memory tools; their JSON schemas are generated from them.

Field descriptions are written for an LLM: they become the ``description`` of
each property in the tool's schema. Bounds come from :data:`~spade_memory.limits.LIMITS`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ..limits import LIMITS
from .validation import WHOLE, Category, Number, OptionalText, RequiredText, ToolArguments

__all__ = [
    "EntityName",
    "ForgetMemoryArguments",
    "ListMemoriesArguments",
    "MemoryId",
    "Relation",
    "RememberInteractionInfoArguments",
    "SearchMemoriesArguments",
    "StoreMemoryArguments",
]

EntityName = Annotated[RequiredText, Field(max_length=LIMITS.entity_chars)]
"""One entity name or relation part."""

MemoryId = Annotated[int, Field(ge=1), WHOLE]
"""A memory id (a positive SQLite rowid; one past SQLite's range is simply not found)."""


class Relation(ToolArguments):
    """How two entities relate."""

    source: EntityName
    relation: EntityName
    target: EntityName


class StoreMemoryArguments(ToolArguments):
    """``store_memory``."""

    category_fields = ("category",)

    category: Annotated[Category, Field(description="The kind of knowledge: {categories}.")]
    content: Annotated[
        RequiredText,
        Field(description="The knowledge itself, one clear self-contained statement."),
    ]
    context: (
        Annotated[
            OptionalText,
            Field(
                max_length=LIMITS.context_chars,
                description="Optional: where or why you learned it.",
            ),
        ]
        | None
    ) = None
    confidence: Annotated[
        Number, Field(ge=0, le=1, description="How sure you are, 0 to 1 (default 1).")
    ] = 1.0
    importance: Annotated[
        Number, Field(ge=0, le=1, description="How much it matters later, 0 to 1 (default 0.5).")
    ] = 0.5
    entities: (
        Annotated[
            list[EntityName],
            Field(
                max_length=LIMITS.explicit_entities,
                description="Optional: names of people, places, organisations or things this "
                "memory is about, e.g. ['Alice', 'Acme'].",
            ),
        ]
        | None
    ) = None
    relations: (
        Annotated[
            list[Relation],
            Field(
                max_length=LIMITS.explicit_entities,
                description="Optional: how entities relate, e.g. [{'source': 'Alice', "
                "'relation': 'works at', 'target': 'Acme'}].",
            ),
        ]
        | None
    ) = None


class SearchMemoriesArguments(ToolArguments):
    """``search_memories``."""

    category_fields = ("category",)

    query: Annotated[
        RequiredText,
        Field(
            max_length=LIMITS.query_chars,
            description="What to look for, e.g. 'Bob deadline report'.",
        ),
    ]
    limit: Annotated[
        int,
        Field(
            ge=1,
            le=LIMITS.tool_search_limit,
            description=f"How many memories to return, 1 to {LIMITS.tool_search_limit} "
            "(default 10).",
        ),
        WHOLE,
    ] = 10
    category: (
        Annotated[Category, Field(description="Optional: only search this kind of knowledge.")]
        | None
    ) = None


class ListMemoriesArguments(ToolArguments):
    """``list_memories``."""

    category_fields = ("category",)

    category: Annotated[Category, Field(description="Optional: only list this kind.")] | None = None
    limit: Annotated[
        int,
        Field(
            ge=1,
            le=LIMITS.tool_list_limit,
            description=f"How many memories to list, 1 to {LIMITS.tool_list_limit} (default 20).",
        ),
        WHOLE,
    ] = 20


class RememberInteractionInfoArguments(ToolArguments):
    """``remember_interaction_info``."""

    information: Annotated[
        RequiredText,
        Field(description="The note, e.g. 'Bob will send the figures on Monday'."),
    ]


class ForgetMemoryArguments(ToolArguments):
    """``forget_memory``."""

    memory_id: Annotated[MemoryId, Field(description="The id of the memory to forget.")]
