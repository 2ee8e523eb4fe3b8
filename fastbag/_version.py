"""The package's version, in a module of its own: the ``fastbag`` command reports it without importing the
package's public names (a higher layer)."""

__version__ = "0.1.0"
