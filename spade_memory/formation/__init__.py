"""Memory formation: what a conversation's messages become in long-term memory.

Pure parts, with no I/O: which pending messages make closed windows
(:mod:`~spade_memory.formation.windows`), what a window becomes by rules
(:mod:`~spade_memory.formation.offline`) or with an LLM, falling back to the rules
(:mod:`~spade_memory.formation.llm_formation`), each as
:class:`~spade_memory.formation.formed.FormedMemory` values naming their source
messages. Storing them is the caller's.
"""
