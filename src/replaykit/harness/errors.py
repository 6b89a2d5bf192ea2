"""The one exception type the command line turns into a single clear line."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path


class InputError(Exception):
    """Bad input, reported as ``<file>: <field>: <message>`` (``<file>: <message>`` when the file
    as a whole is bad) and exit status 2.

    Args:
        path: the file (or directory) that holds the bad value.
        field: the key, column, option or JSON path inside it; ``None`` when the file as a whole
            is bad (missing, empty, not JSON), so that no placeholder takes a field's place.
        message: what is wrong, in a few words.
    """

    def __init__(self, path: str | Path, field: str | None, message: str) -> None:
        self.path = str(path)
        self.field = field or None
        self.message = message
        super().__init__(f"{self.path}: {field}: {message}" if field else f"{self.path}: {message}")


def unexpanded_path(value: str) -> str | None:
    """Why path ``value`` is not what its writer meant, or None: it starts with ``~`` or holds a
    ``$NAME`` / ``${NAME}`` (a shell expands them; nothing here does, so they would name
    folders called ``~`` or ``$HOME``), starts or ends with white space, or holds a control
    character (a newline, a tab: a folder so named is legal but never what was meant, and the
    shell commands and logs that name it would split it)."""
    if control := next((c for c in value if unicodedata.category(c) == "Cc"), None):
        return f"{value!r} holds the control character {control!r}: write the path without it"
    if value.startswith("~"):
        what = "starts with '~'"
    elif re.search(r"\$[A-Za-z_{(]", value):
        what = "holds a '$' variable"
    elif value != value.strip():
        return f"{value!r} starts or ends with white space: write the path without it"
    else:
        return None
    return f"{value!r} {what}, which is not expanded here (it would name a folder so called): write the full path"
