"""Start-up checks: what would otherwise fail after the first event (or as a traceback) is refused
before it, with one line that names the file, flag or key at fault."""

from __future__ import annotations

__all__ = ["StartupError"]


class StartupError(Exception):
    """Something a command needs cannot be used; the message names it, and the flag or key that gave it."""
