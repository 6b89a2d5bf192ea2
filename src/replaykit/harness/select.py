"""Selection among a run's retained checkpoints: the official result (the best *valid* final
result) and, beside it, the proxy-selected one (the valid checkpoint the proxy ranks best)."""

from __future__ import annotations

from collections.abc import Iterable

TIE_RULE = "ties go to the greater progress (the later of equally scored checkpoints)"


def best_valid(results: Iterable[dict], direction: str, key: str = "value") -> dict | None:
    """Pick the official result (``key="value"``: the final split) or the proxy-selected one
    (``key="proxy_value"``: the public proxy split).

    Args:
        results: dicts with ``progress`` (int), ``valid`` (bool) and ``key`` (float or None).
        direction: ``maximize`` or ``minimize``.
        key: the score that ranks them.

    Returns:
        The best valid result with a ``key`` value, or ``None`` when there is none. Ties are
        broken by the greater progress (the later checkpoint of equal score): :data:`TIE_RULE`,
        the same for both selections.

    Raises:
        ValueError: unknown direction.
    """
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    sign = 1.0 if direction == "maximize" else -1.0
    candidates = [r for r in results if r.get("valid") and r.get(key) is not None]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (sign * r[key], r["progress"]))


def proxy_selected(checkpoints: list[dict], direction: str) -> dict | None:
    """The proxy-selected result of a run: the valid retained checkpoint with the best
    ``proxy_value`` (:func:`best_valid`, same tie rule), its final value, and the oracle gap
    ``sign × (official − proxy-selected)`` on the final split (``sign`` +1 to maximise, −1 to
    minimise: the gap is >= 0, as the official result is the best valid final value). It is what
    a reader would get without choosing on the final split itself.

    Returns ``{progress, proxy_value, final_value, oracle_gap, official_progress, rule}`` or None
    when no valid checkpoint has both a proxy and a final value. Raises ValueError for an
    unknown direction.
    """
    scored = [c for c in checkpoints if c.get("value") is not None]
    chosen, official = best_valid(scored, direction, key="proxy_value"), best_valid(scored, direction)
    if chosen is None:
        return None
    sign = 1.0 if direction == "maximize" else -1.0
    return {
        "progress": chosen["progress"],
        "proxy_value": chosen["proxy_value"],
        "final_value": chosen["value"],
        "oracle_gap": sign * (official["value"] - chosen["value"]) + 0.0,  # never -0.0 (IEEE 754)
        "official_progress": official["progress"],
        "rule": f"best proxy value among the valid retained checkpoints; {TIE_RULE}",
    }
