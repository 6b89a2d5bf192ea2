"""The one exception type the command line turns into a single clear line."""

from __future__ import annotations

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


def tilde_path(value: str) -> str:
    """The message for a path written with ``~``, which the workflow does not expand."""
    return (
        f"{value!r} starts with '~', which is not expanded here (it would name a folder called '~'): "
        "write the full path"
    )
