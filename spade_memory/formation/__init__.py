"""Memory formation: an agent's kept conversations, and what they become in long-term memory.

- :mod:`~spade_memory.formation.history`: the conversation history API
  (``MemoryManager.history``);
- :mod:`~spade_memory.formation.service`: the background service forming the closed
  windows of each conversation into memories, committed with their sources;
- pure parts, with no I/O: which pending messages make closed windows
  (:mod:`~spade_memory.formation.windows`), what a window becomes by rules
  (:mod:`~spade_memory.formation.offline`) or with an LLM, falling back to the rules
  (:mod:`~spade_memory.formation.llm_formation`), each as
  :class:`~spade_memory.formation.formed.FormedMemory` values naming their source
  messages.
"""
