"""The message layer: definitions, the layout compiler (encoding rules), the Numba kernels, arrays, sensors.

Knows nothing of containers: it turns a type's definition and message bytes into arrays, and rows
of those arrays into message objects (messages.py).
"""
