"""backstep's version, in a module of its own so that the CLI reads it without importing the
package's ``__init__`` (which reaches the CLI back through the notebook helpers)."""

__version__ = "0.1.0"
