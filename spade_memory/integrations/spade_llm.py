"""spade_memory behind spade_llm: its memory tools and its ``MemoryBackend``.

Three ways to give a spade_llm agent this memory (``pip install "spade-memory[spade-llm]"``):

```python
from spade_llm.agent import LLMAgent
from spade_llm.memory import AgentBaseMemory
from spade_memory import MemoryConfig, MemoryManager
from spade_memory.integrations.spade_llm import (
    SpadeMemoryBackend, SpadeMemoryInteractionMemory, spade_llm_tools, use_interaction_memory)

# 1. spade_llm's AgentBaseMemory, kept and searched by spade_memory
backend = SpadeMemoryBackend(jid="alice@localhost", root="./memory")
memory = AgentBaseMemory("alice@localhost", backend=backend)

# 2. spade_memory's tools in spade_llm's LLMAgent
manager = await MemoryManager.open("alice@localhost", MemoryConfig(root="./memory"))
agent = LLMAgent("alice@localhost", "secret", provider=provider,
                 tools=spade_llm_tools(manager))

# 3. spade_llm's interaction notes (injected into its prompt) kept by spade_memory
use_interaction_memory(agent, SpadeMemoryInteractionMemory(manager))
```

Importing ``spade_memory`` never imports spade_llm; this module does, and raises a
clear ``ImportError`` on use when spade_llm is missing. See
:mod:`~spade_memory.integrations.spade_llm_backend` for how fields map and
:mod:`~spade_memory.integrations.spade_llm_tools` for the tools.
"""

from __future__ import annotations

from .spade_llm_backend import SpadeMemoryBackend, SpadeMemoryEntry
from .spade_llm_interactions import SpadeMemoryInteractionMemory, use_interaction_memory
from .spade_llm_tools import (
    INSTALL_HINT,
    SpadeLLMMemoryTool,
    ToolBinding,
    require_spade_llm,
    spade_llm_tools,
)

__all__ = [
    "INSTALL_HINT",
    "SpadeLLMMemoryTool",
    "SpadeMemoryBackend",
    "SpadeMemoryEntry",
    "SpadeMemoryInteractionMemory",
    "ToolBinding",
    "require_spade_llm",
    "spade_llm_tools",
    "use_interaction_memory",
]
