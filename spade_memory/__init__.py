"""spade_memory: long-term memory for SPADE agents and their LLMs.

The names below are imported when first used (PEP 562), so that a program
using one part (the ``spade-memory`` command listing a root, say) does not pay
for loading SPADE, FAISS or the tokenizer's dictionaries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import on_first_use

if TYPE_CHECKING:
    from .config import (
        AtomConfig,
        ChatConfig,
        ContextBudget,
        FormationConfig,
        MaintenanceConfig,
        MemoryConfig,
        RetrievalConfig,
        RetrievalTuning,
        ScopePolicy,
        SharingConfig,
        StorageConfig,
        ToolBudget,
    )
    from .embedding.openai_compatible import OpenAICompatibleEmbedder
    from .errors import (
        AskFailed,
        BudgetExceeded,
        ConfigError,
        EmbeddingError,
        EmbeddingUnavailable,
        FormationFailed,
        InvalidAgentId,
        InvalidToolInput,
        LLMError,
        MemoryLost,
        MemoryNotFound,
        MigrationError,
        PathEscapeError,
        ProtocolError,
        ScopeDenied,
        SharingError,
        SharingRefused,
        SharingTimeout,
        SpadeMemoryError,
        StorageCorrupted,
        StorageError,
        StoreClosedError,
        XMPPServerError,
    )
    from .identity import conversation_id_for, normalize_jid
    from .integrations.spade_llm_import import SpadeLlmImport, import_spade_llm
    from .llm import (
        ChatMessage,
        LLMClient,
        LLMResponse,
        OpenAICompatibleLLM,
        ToolCall,
    )
    from .manager import MemoryManager
    from .models import (
        ConversationInfo,
        ConversationMessage,
        InteractionNote,
        Memory,
        MemoryRecovery,
        MemoryStats,
        Scope,
        ScoreExplanation,
        SearchResult,
        Viewer,
    )
    from .spade.conversation import ConversationBehaviour
    from .spade.llm_agent import LLMAgent
    from .spade.maintenance_behaviour import MaintenanceBehaviour
    from .spade.mixin import MemoryMixin
    from .testing.scripted_llm import ScriptedLLM
    from .testing.xmpp_server import EmbeddedXMPPServer, XMPPEndpoint, xmpp_endpoint
    from .text.atoms import Atom
    from .tools import (
        MemoryTool,
        RequestBudget,
        ToolContext,
        ToolResult,
    )

__version__ = "0.1.0"

__all__ = [
    "AskFailed",
    "Atom",
    "AtomConfig",
    "BudgetExceeded",
    "ChatConfig",
    "ChatMessage",
    "ConfigError",
    "ContextBudget",
    "ConversationBehaviour",
    "ConversationInfo",
    "ConversationMessage",
    "EmbeddedXMPPServer",
    "EmbeddingError",
    "EmbeddingUnavailable",
    "FormationConfig",
    "FormationFailed",
    "InteractionNote",
    "InvalidAgentId",
    "InvalidToolInput",
    "LLMAgent",
    "LLMClient",
    "LLMError",
    "LLMResponse",
    "MaintenanceBehaviour",
    "MaintenanceConfig",
    "Memory",
    "MemoryConfig",
    "MemoryLost",
    "MemoryManager",
    "MemoryMixin",
    "MemoryNotFound",
    "MemoryRecovery",
    "MemoryStats",
    "MemoryTool",
    "MigrationError",
    "OpenAICompatibleEmbedder",
    "OpenAICompatibleLLM",
    "PathEscapeError",
    "ProtocolError",
    "RequestBudget",
    "RetrievalConfig",
    "RetrievalTuning",
    "Scope",
    "ScopeDenied",
    "ScopePolicy",
    "ScoreExplanation",
    "ScriptedLLM",
    "SearchResult",
    "SharingConfig",
    "SharingError",
    "SharingRefused",
    "SharingTimeout",
    "SpadeLlmImport",
    "SpadeMemoryError",
    "StorageConfig",
    "StorageCorrupted",
    "StorageError",
    "StoreClosedError",
    "ToolBudget",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "Viewer",
    "XMPPEndpoint",
    "XMPPServerError",
    "conversation_id_for",
    "import_spade_llm",
    "normalize_jid",
    "xmpp_endpoint",
]

_SOURCES: dict[str, str] = {
    "AskFailed": "errors",
    "Atom": "text.atoms",
    "AtomConfig": "config",
    "BudgetExceeded": "errors",
    "ChatConfig": "config",
    "ChatMessage": "llm",
    "ConfigError": "errors",
    "ContextBudget": "config",
    "ConversationBehaviour": "spade.conversation",
    "ConversationInfo": "models",
    "ConversationMessage": "models",
    "EmbeddedXMPPServer": "testing.xmpp_server",
    "EmbeddingError": "errors",
    "EmbeddingUnavailable": "errors",
    "FormationConfig": "config",
    "FormationFailed": "errors",
    "InteractionNote": "models",
    "InvalidAgentId": "errors",
    "InvalidToolInput": "errors",
    "LLMAgent": "spade.llm_agent",
    "LLMClient": "llm",
    "LLMError": "errors",
    "LLMResponse": "llm",
    "MaintenanceBehaviour": "spade.maintenance_behaviour",
    "MaintenanceConfig": "config",
    "Memory": "models",
    "MemoryConfig": "config",
    "MemoryLost": "errors",
    "MemoryManager": "manager",
    "MemoryMixin": "spade.mixin",
    "MemoryNotFound": "errors",
    "MemoryRecovery": "models",
    "MemoryStats": "models",
    "MemoryTool": "tools",
    "MigrationError": "errors",
    "OpenAICompatibleEmbedder": "embedding.openai_compatible",
    "OpenAICompatibleLLM": "llm",
    "PathEscapeError": "errors",
    "ProtocolError": "errors",
    "RequestBudget": "tools",
    "RetrievalConfig": "config",
    "RetrievalTuning": "config",
    "Scope": "models",
    "ScopeDenied": "errors",
    "ScopePolicy": "config",
    "ScoreExplanation": "models",
    "ScriptedLLM": "testing.scripted_llm",
    "SearchResult": "models",
    "SharingConfig": "config",
    "SharingError": "errors",
    "SharingRefused": "errors",
    "SharingTimeout": "errors",
    "SpadeLlmImport": "integrations.spade_llm_import",
    "SpadeMemoryError": "errors",
    "StorageConfig": "config",
    "StorageCorrupted": "errors",
    "StorageError": "errors",
    "StoreClosedError": "errors",
    "ToolBudget": "config",
    "ToolCall": "llm",
    "ToolContext": "tools",
    "ToolResult": "tools",
    "Viewer": "models",
    "XMPPEndpoint": "testing.xmpp_server",
    "XMPPServerError": "errors",
    "conversation_id_for": "identity",
    "import_spade_llm": "integrations.spade_llm_import",
    "normalize_jid": "identity",
    "xmpp_endpoint": "testing.xmpp_server",
}
"""The module of each public name, imported on first use."""


__getattr__, __dir__ = on_first_use(globals(), _SOURCES)
