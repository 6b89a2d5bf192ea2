"""How numbers and free text appear in the reports (the templates' filters ``fmt``, ``pct``,
``sec`` and ``cell``, and the ablation's ``f`` / ``sf``)."""

from __future__ import annotations

from ..harness.stats import decimal


def fmt_number(value, se=None) -> str:
    """``0.1234`` or ``0.1234 ± 0.0100`` (4 decimals); ``-`` for no value (the reports' filter ``fmt``)."""
    if value is None:
        return "-"
    return decimal(value) + (f" ± {decimal(se)}" if se is not None else "")


def fmt_percent(value) -> str:
    """A fraction as a percentage with one decimal; ``-`` for none (filter ``pct``)."""
    return "-" if value is None else f"{value:.1%}"


def md_cell(text) -> str:
    """Free text (a reason, an advisory) as one line of Markdown that cannot end a table cell or
    start a block: newlines become spaces, ``|`` is escaped (the reports' filter ``cell``)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def fmt_seconds(value) -> str:
    """Seconds as ``12 s``; ``-`` for none (filter ``sec``)."""
    return "-" if value is None else f"{value:.0f} s"


def fmt_plain(value) -> str:
    """4 decimals without a sign for zero (``-0.0000`` reads ``0.0000``); ``-`` for none."""
    return "-" if value is None else decimal(value)


def fmt_signed(value) -> str:
    """A difference with its sign, 4 decimals (``+0.0067``); ``-`` for none."""
    return "-" if value is None else decimal(value, signed=True)
