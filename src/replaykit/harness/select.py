"""Selection of the official result: the best *valid* final result among retained checkpoints."""

from __future__ import annotations

from collections.abc import Iterable


def best_valid(results: Iterable[dict], direction: str) -> dict | None:
    """Pick the official result.

    Args:
        results: dicts with ``progress`` (int), ``valid`` (bool) and ``value`` (float or None).
        direction: ``maximize`` or ``minimize``.

    Returns:
        The best valid result with a value, or ``None`` when none is valid. Ties are broken
        by the greater progress (the later checkpoint of equal score).

    Raises:
        ValueError: unknown direction.
    """
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    sign = 1.0 if direction == "maximize" else -1.0
    candidates = [r for r in results if r.get("valid") and r.get("value") is not None]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (sign * r["value"], r["progress"]))
