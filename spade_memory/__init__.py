"""spade_memory: long-term memory for SPADE agents and their LLMs."""

from __future__ import annotations

from .config import (
    AtomConfig,
    ContextBudget,
    MaintenanceConfig,
    MemoryConfig,
    RetrievalConfig,
    RetrievalTuning,
    SharingConfig,
    StorageConfig,
    ToolBudget,
)
from .embedding.openai_compatible import OpenAICompatibleEmbedder
from .errors import (
    BudgetExceeded,
    ConfigError,
    EmbeddingError,
    EmbeddingUnavailable,
    InvalidAgentId,
    InvalidToolInput,
    LLMError,
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
    InteractionNote,
    Memory,
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
    "Atom",
    "AtomConfig",
    "BudgetExceeded",
    "ChatMessage",
    "ConfigError",
    "ContextBudget",
    "ConversationBehaviour",
    "EmbeddedXMPPServer",
    "EmbeddingError",
    "EmbeddingUnavailable",
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
    "MemoryManager",
    "MemoryMixin",
    "MemoryNotFound",
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
