"""spade_memory: long-term memory for SPADE agents and their LLMs.

The SPADE side (agents, behaviours, the embedded XMPP server) is imported on first
use of one of its names: a program that only opens a :class:`MemoryManager` does
not import SPADE, whose server package makes a temporary folder when imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from .errors import (
    BudgetExceeded,
    ConfigError,
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
    MemoryRecovery,
    MemoryStats,
    Scope,
    ScoreExplanation,
    SearchResult,
    Viewer,
)
from .testing.scripted_llm import ScriptedLLM
from .text.atoms import Atom
from .tools import (
    MemoryTool,
    RequestBudget,
    ToolContext,
    ToolResult,
)

if TYPE_CHECKING:
    from .spade.conversation import ConversationBehaviour
    from .spade.llm_agent import LLMAgent
    from .spade.maintenance_behaviour import MaintenanceBehaviour
    from .spade.mixin import MemoryMixin
    from .testing.xmpp_server import EmbeddedXMPPServer

__version__ = "0.1.0"

# Names whose modules import SPADE, by the module that defines each.
_ON_FIRST_USE = {
    "ConversationBehaviour": ".spade.conversation",
    "EmbeddedXMPPServer": ".testing.xmpp_server",
    "LLMAgent": ".spade.llm_agent",
    "MaintenanceBehaviour": ".spade.maintenance_behaviour",
    "MemoryMixin": ".spade.mixin",
    "XMPPEndpoint": ".testing.xmpp_server",
    "xmpp_endpoint": ".testing.xmpp_server",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ON_FIRST_USE))

__all__ = [
    "Atom",
    "AtomConfig",
    "BudgetExceeded",
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
    "MemoryLost",
    "MemoryManager",
    "MemoryMixin",
    "MemoryNotFound",
    "MemoryRecovery",
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
    "XMPPEndpoint",
    "XMPPServerError",
    "conversation_id_for",
    "normalize_jid",
    "xmpp_endpoint",
]
