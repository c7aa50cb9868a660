"""spade_memory: long-term memory for SPADE agents and their LLMs."""

from __future__ import annotations

from .config import ContextBudget, MemoryConfig, RetrievalConfig, StorageConfig, ToolBudget
from .errors import (
    BudgetExceeded,
    ConfigError,
    InvalidAgentId,
    InvalidToolInput,
    LLMError,
    MemoryNotFound,
    MigrationError,
    PathEscapeError,
    SpadeMemoryError,
    StorageCorrupted,
    StorageError,
    StoreClosedError,
)
from .identity import conversation_id_for, normalize_jid
from .manager import MemoryManager
from .models import InteractionNote, Memory, MemoryStats, ScoreExplanation, SearchResult

__version__ = "0.1.0"

__all__ = [
    "BudgetExceeded",
    "ConfigError",
    "ContextBudget",
    "InteractionNote",
    "InvalidAgentId",
    "InvalidToolInput",
    "LLMError",
    "Memory",
    "MemoryConfig",
    "MemoryManager",
    "MemoryNotFound",
    "MemoryStats",
    "MigrationError",
    "PathEscapeError",
    "RetrievalConfig",
    "ScoreExplanation",
    "SearchResult",
    "SpadeMemoryError",
    "StorageConfig",
    "StorageCorrupted",
    "StorageError",
    "StoreClosedError",
    "ToolBudget",
    "conversation_id_for",
    "normalize_jid",
]
