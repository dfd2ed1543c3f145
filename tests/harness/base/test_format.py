"""How numbers, parameters and names are written in tables, reports and file names."""

import json
import math

from harness.base.format import (
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_plain,
    fmt_ratio,
    fmt_time,
    md_escape,
    params_label,
    slug,
)


def test_times_take_the_largest_unit_that_keeps_them_at_least_one():
    assert fmt_time(2.5) == "2.5 s"
    assert fmt_time(0.0123) == "12.3 ms"
    assert fmt_time(5.5e-6) == "5.5 µs"
    assert fmt_time(3e-10) == "0.3 ns"
    assert fmt_time(None) == fmt_time(math.nan) == fmt_time(math.inf) == "–"


def test_ratios_never_print_an_exponent_and_p_values_never_print_zero():
    assert fmt_ratio(5760.4) == "5,760×"
    assert fmt_ratio(1.234) == "1.23×" and fmt_ratio(2, suffix="") == "2"
    assert fmt_ratio(math.nan) == "–"
    assert fmt_p(0.0) == "< 1e-300" and fmt_p(0.01234) == "0.012"
    assert fmt_num(0.5, suffix=" GB/s") == "0.5 GB/s" and fmt_num(1.2e-7, 2) == "1.2e-07"


def test_large_numbers_and_percentages_print_as_plain_numbers():
    # A copy ceiling measured under load put "1.42e+03 %" in the report's tables.
    assert fmt_pct(1420.4) == "1,420 %" and fmt_pct(465.2) == "465 %" and fmt_pct(46.53) == "46.5 %"
    assert fmt_pct(5.12e-5) == "0.0000512 %" and fmt_pct(0.0) == "0 %" and fmt_pct(math.nan) == "–"
    # fmt_num, which tables and sentences still call with " %", writes large values out too
    assert fmt_num(1420.4, 3, " %") == "1,420 %" and fmt_num(12345.0) == "12,300"
    assert fmt_num(999.6) == "1,000" and fmt_num(465.2, 2) == "470" and fmt_num(-1420.4) == "-1,420"
    assert fmt_plain(5.0) == "5" and fmt_plain(0.1) == "0.1"
    for value in (1420.4, 5015.0, 123456789.0, 999.96, 5.12e-5):
        assert "e" not in fmt_pct(value), value
    for value in (1420.4, 5015.0, 123456789.0, 999.96):
        assert "e" not in fmt_num(value), value


def test_params_are_labelled_in_the_operators_order_not_sorted():
    # case ids store parameters sorted; labels follow maxpool2d's declaration (N, C, H, W, k)
    assert params_label(json.dumps({"C": 2, "H": 6, "N": 1, "W": 8, "k": 2})) == "N=1 C=2 H=6 W=8 k=2"
    assert params_label(json.dumps({"zz_unknown": 1, "N": 3})).startswith("N=3")


def test_markdown_escaping_keeps_underscores_and_one_line():
    assert md_escape("numpy_put|along*`x`\nnext") == "numpy_put\\|along\\*\\`x\\` next"
    assert md_escape("a\\b") == "a\\\\b"


def test_long_slugs_keep_a_hash_so_texts_differing_past_the_cut_do_not_collide():
    assert slug("Max Pool 2D / float32!") == "max-pool-2d-float32"
    first, second = slug("x" * 100 + "a"), slug("x" * 100 + "b")
    assert len(first) == len(second) == 80 and first != second


def test_a_shortened_message_is_cut_between_words_never_inside_a_number():
    from harness.base.format import shorten

    message = "values: 3 elements differ; first difference at (0, 0, 1, 1): got 2.2801596115257716, expected -5.0"
    assert shorten(message, len(message)) == message
    for limit in range(10, len(message)):
        cut = shorten(message, limit)
        assert len(cut) <= limit and cut.endswith("…")
        kept = cut[:-1]
        assert message.startswith(kept) and message[len(kept)] in " ,;:", (limit, cut)
    assert shorten("x" * 30, 10) == "x" * 9 + "…"  # one long word: cut, since nothing else fits


def test_every_mode_and_layout_label_comes_from_one_function():
    """The table cell, a table's title, the dashboard's title and the plan say a case's mode and
    layout alike: contiguous unsaid, forward unsaid in titles, absent or empty cells as defaults."""
    import pandas as pd

    from harness.base.cases import mode_and_layout
    from harness.presenting.tables import _mode_title, _row_title

    assert mode_and_layout({"mode": "backward", "layout": "channels_last"}) == "backward channels_last"
    assert mode_and_layout({}) == "forward"
    assert mode_and_layout({"mode": float("nan"), "layout": ""}, sep=" · ", say_forward=False) == ""
    assert mode_and_layout({"layout": "channels_last"}, sep=" · ", say_forward=False) == "channels_last"
    assert _mode_title("forward") == "" and _mode_title("backward", "channels_last") == "  backward  channels_last"
    assert _row_title(pd.Series({"mode": "forward", "layout": "channels_last"})) == "  channels_last"
