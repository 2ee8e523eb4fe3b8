"""The bottom layer: the mapped file, codecs, recycled buffers, the chunk store and its read-ahead pool.

Knows nothing of any container format or message encoding.
"""
