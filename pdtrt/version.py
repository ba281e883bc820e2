"""pdtrt's version, in a module of its own so any layer can name it without importing the
package's public API (``pdtrt/__init__`` imports the build and repo stages, which record it)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pdtrt")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
