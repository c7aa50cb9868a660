"""spade_memory: long-term memory for SPADE agents and their LLMs."""

from __future__ import annotations

from .config import (
    AtomConfig,
    ChatConfig,
    ContextBudget,
    MaintenanceConfig,
    MemoryConfig,
    RetrievalConfig,
    RetrievalTuning,
    ScopePolicy,
    SharingConfig,
    StorageConfig,
    ToolBudget,
)
from .errors import (
    BudgetExceeded,
    ConfigError,
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
from .testing.xmpp_server import EmbeddedXMPPServer
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
    "ChatConfig",
    "ChatMessage",
    "ConfigError",
    "ContextBudget",
    "ConversationBehaviour",
    "EmbeddedXMPPServer",
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
    "XMPPServerError",
    "conversation_id_for",
    "normalize_jid",
]
