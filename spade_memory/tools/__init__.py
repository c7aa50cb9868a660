"""Memory tools for LLMs: tool objects, JSON schemas, validation and per-request budgets.

```python
from spade_memory.tools import RequestBudget, ToolContext

budget = RequestBudget(manager.config.tools)
for tool in manager.tools():
    result = await tool.call('{"query": "deadline"}', ToolContext(manager, budget=budget))
```
"""

from __future__ import annotations

from .base import (
    MemoryBackend,
    MemoryTool,
    ToolContext,
    ToolResult,
)
from .budget import BudgetSpent, RequestBudget
from .memory_tools import (
    ForgetMemoryTool,
    ListMemoriesTool,
    RememberInteractionInfoTool,
    SearchMemoriesTool,
    StoreMemoryTool,
    build_memory_tools,
)
from .validation import validate_arguments

__all__ = [
    "BudgetSpent",
    "ForgetMemoryTool",
    "ListMemoriesTool",
    "MemoryBackend",
    "MemoryTool",
    "RememberInteractionInfoTool",
    "RequestBudget",
    "SearchMemoriesTool",
    "StoreMemoryTool",
    "ToolContext",
    "ToolResult",
    "build_memory_tools",
    "validate_arguments",
]
