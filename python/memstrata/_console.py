"""The command line's output in whatever encoding it is given.

Windows writes output that goes to a pipe or a file in the console's code page (cp1252, say),
which has no box-drawing characters, no CJK and no emoji; printing one there raises
UnicodeEncodeError and ends the command half-way. The commands' output shows such characters
as Python escapes instead (``\\u6771``), and ``inspect --json`` writes ASCII-only JSON there,
which reads back as the same values.
"""

from __future__ import annotations

import codecs
import io
import sys
from typing import Any


def writes_unicode(stream: Any) -> bool:
    """Whether ``stream`` encodes every character: a UTF encoding."""
    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name.startswith("utf")
    except LookupError:
        return False


def escape_what_output_cannot_encode() -> None:
    """Standard output and error show the characters their encoding lacks as escapes."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and not writes_unicode(stream):
            stream.reconfigure(errors="backslashreplace")
