"""The memory inspector: web pages that show what an agent remembers.

``MemoryMixin`` adds them to SPADE's agent web interface (a "Memory" entry, under
``/spade/memory``, once ``agent.web.start(...)`` runs); ``spade-memory serve``
serves them for every agent of a memory root (:mod:`.fleet`). Modules:

- :mod:`.routes`: the pages and edits of one agent's memory (HTML, or JSON with
  ``?format=json``), the same for both;
- :mod:`.views`: what each page shows, read through ``MemoryManager``;
- :mod:`.communities`: the graph view's data, with weighted Louvain communities;
- :mod:`.security`: the per-agent token, the same-origin and host checks, headers;
- :mod:`.render`: templates (autoescaped) and the package's static files;
- :mod:`.agent_pages`: the hook into SPADE's ``WebApp``; :mod:`.fleet`: ``serve``.
"""

from __future__ import annotations

__all__: list[str] = []
