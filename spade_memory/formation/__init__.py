"""Memory formation: an agent's kept conversations, and the memories formed from them.

- :mod:`~spade_memory.formation.history`: the conversation history API
  (``MemoryManager.history``);
- :mod:`~spade_memory.formation.service`: the background service forming closed
  windows of each conversation into memories.
"""
