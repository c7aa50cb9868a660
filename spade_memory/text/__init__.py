"""Text processing, with no I/O: tokenizer, extraction of entities and relations,
dates, and memory atoms.

Nothing here imports storage, retrieval or SPADE; storage and retrieval use it.
"""
