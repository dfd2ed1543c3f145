"""Formatting shared by tables, reports and the dashboard: times, numbers,
parameter labels and Markdown escaping. Pure functions."""

from __future__ import annotations

import json
import math
import re
import zlib

from harness.base.cases import POINT_LAYOUT_KEY


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_bytes(nbytes: float) -> str:
    """A size in binary units to three significant figures ("4 KiB", "19.3 MiB"): a bandwidth
    curve's sizes, in the run's line and the report's curves table."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes:.3g} B"


def fmt_num(value: float | None, digits: int = 3, suffix: str = "") -> str:
    """``digits`` significant figures; a number too large for them is
    rounded to them and written whole with thousands separators ("1,420",
    never "1.42e+03"). Small ones keep the exponent (a relative error of
    "1.2e-07" reads better than its zeros)."""
    if value is None or not math.isfinite(value):
        return "–"
    rounded = float(f"{value:.{digits}g}")  # 999.6 rounds to 1,000, past what the digits hold
    if abs(rounded) >= 10 ** digits:
        return f"{rounded:,.0f}{suffix}"
    return f"{value:.{digits}g}{suffix}"


def fmt_plain(value: float | None, digits: int = 3) -> str:
    """``digits`` significant figures written out, with no exponent at any
    size: "1,420", "46.5", "0.0000512"; "–" for none."""
    if value is None or not math.isfinite(value):
        return "–"
    rounded = float(f"{value:.{digits}g}")
    if rounded == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fmt_pct(value: float | None, digits: int = 3) -> str:
    """A percentage as a plain number and " %": "465 %", "1,420 %",
    "0.0512 %" (a copy ceiling measured under load put "1.42e+03 %" in a
    table). Every table, sentence and figure writes percentages with it."""
    text = fmt_plain(value, digits)
    return text if text == "–" else f"{text} %"


def fmt_p(value: float | None) -> str:
    """A p-value: two significant figures; one that underflowed to 0 is
    shown as the bound it is below, never as a certainty."""
    if value is None or not math.isfinite(value):
        return "–"
    return "< 1e-300" if value == 0 else f"{value:.2g}"


def fmt_ratio(value: float | None, suffix: str = "×") -> str:
    """A speedup or ratio with three significant figures and no exponent:
    ``5.76e+03×`` reads worse than ``5760×``."""
    if value is None or not math.isfinite(value):
        return "–"
    if value >= 1000:
        return f"{value:,.0f}{suffix}"
    return f"{value:.3g}{suffix}"


def fmt_ratio_interval(value: float | None, interval=None, suffix: str = "×") -> str:
    """A ratio with the interval of its per-round ratios, "8.9× (7.1–10.4)"
    (SPEC 3 "Racing": every printed ratio carries it); the ratio alone
    where no interval is known."""
    text = fmt_ratio(value, suffix)
    if text == "–" or not interval:
        return text
    low, high = interval
    return f"{text} ({fmt_ratio(low, '')}–{fmt_ratio(high, '')})"


def param_order() -> tuple[str, ...]:
    """Every operator's parameter names, in the order the operators declare
    them (case ids store them sorted)."""
    from impls.registry import OPERATORS

    order: list[str] = []
    for op in OPERATORS.values():
        for spec in op.params:
            if spec.name not in order:
                order.append(spec.name)
    return tuple(order)


def ordered_params(params: dict) -> list[str]:
    """The keys in the order of the operator that declares them all (the
    first such operator), else in every operator's order; a report point's
    ``layout`` (docs/SPEC.md §2) last."""
    from impls.registry import OPERATORS

    order = next((tuple(spec.name for spec in op.params) for op in OPERATORS.values()
                  if set(params) - {POINT_LAYOUT_KEY} <= {spec.name for spec in op.params}), param_order())
    return sorted(params, key=lambda key: (order.index(key) if key in order else len(order), key))


def params_label(params_json: str) -> str:
    params = json.loads(params_json)
    return " ".join(f"{key}={params[key]}" for key in ordered_params(params))


def md_escape(text: str) -> str:
    text = str(text).replace("\\", "\\\\")
    # "_" inside words is not emphasis in GitHub Markdown; names keep their underscores.
    for char in "|*`<>[]#$":
        text = text.replace(char, "\\" + char)
    return text.replace("\n", " ")


def slug(text: str) -> str:
    """A file and anchor name; a long one keeps a hash of the whole text, so
    two texts that differ only past the cut never share a file."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return name if len(name) <= 80 else f"{name[:71]}-{zlib.crc32(text.encode()):08x}"


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: whole when it fits, else cut
    at the last space before the limit with "…", so that no number or name
    is shown cut in half (a cut "2.2801" reads as a value)."""
    text = str(text)
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else cut).rstrip(" ,;:") + "…"
