"""The one exception type the command line turns into a single clear line."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input, reported as ``<file>: <field>: <message>`` and exit status 2.

    Args:
        path: the file (or directory) that holds the bad value.
        field: the key, column or JSON path inside it (``-`` when the file as a whole is bad).
        message: what is wrong, in a few words.
    """

    def __init__(self, path: str | Path, field: str, message: str) -> None:
        self.path = str(path)
        self.field = field
        self.message = message
        super().__init__(f"{self.path}: {field}: {message}")
