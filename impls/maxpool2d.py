"""maxpool2d — max-pooling with argmax indices (docs/SPEC.md §1.1, seed 000).

in:  x (N, C, H, W) float; window k, stride s (default k), padding p (default
     0, at most k // 2): the seed's case is s = k, p = 0; ResNet's stem pools
     k = 3, s = 2, p = 1, overlapping and padded.
out: values (N, C, h, w), h = (H + 2p - k) // s + 1 (w likewise), same dtype;
     indices, same shape, int64: the flat position ``r*W + c`` in the input's
     full H×W plane (PyTorch's convention). Rows/cols no window reaches are
     cropped. Padding is never a maximum nor an index: a window is compared
     over its real elements only; an all -inf window points at its first.
     A strategy is taken to be written for s = k, p = 0 only (the first
     contract; the seeds' reshape forms) and is ``skipped`` elsewhere, unless
     it declares ``outside_when=every_case`` (or its own rule).
ties: the first maximum in row-major window order; a strategy declaring
     ``ties="any"`` may point at any element equal to the maximum.
NaN: the value is NaN and the index points at a NaN of the window.
bytes: x + values + indices.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from array_api_compat import array_namespace

from impls import common, status
from impls.backends import dtype_record, to_numpy
from impls.common import Verdict, any_of, shape_of
from impls.registry import Gradient, Operator, ParamSpec, compiled, every_case, register_operator, strategy

SEED = "seed 000_ed8c570cde2fae5b.txt"
# What a strategy returning the values and each window's flat argmax declares: the first
# maximum in row-major order wins a tie (most strategies return this pair).
INDICES_FIRST_TIE = dict(returns="values+indices", ties="first")


# ---------------------------------------------------------------- contract
def window(params) -> tuple[int, int, int]:
    """(k, s, p): the window, its stride (k where not given) and its padding (0 where not given)."""
    k = params["k"]
    stride, padding = params.get("s"), params.get("p")
    return k, k if stride is None else stride, 0 if padding is None else padding


def pooled_size(params) -> tuple[int, int]:
    """(h, w): how many windows fit down and across (SPEC 1.1)."""
    return _pooled_plane(params["H"], params["W"], *window(params))


def _pooled_plane(H: int, W: int, k: int, s: int, p: int) -> tuple[int, int]:
    """``pooled_size`` of an H×W plane."""
    return (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1


def _at(a, di: int, dj: int, h: int, w: int, s: int):
    """The (N, C, h, w) view of ``a`` (padded where the windows are) holding each window's
    element at row ``di``, column ``dj`` of the window: read, or written through."""
    return a[:, :, di:di + (h - 1) * s + 1:s, dj:dj + (w - 1) * s + 1:s]


def _padded(a, p: int, fill):
    """``a`` (N, C, H, W) inside a border ``p`` wide of ``fill``, in its namespace and dtype."""
    xp = array_namespace(a)
    N, C, H, W = shape_of(a)
    padded = xp.full((N, C, H + 2 * p, W + 2 * p), fill, dtype=a.dtype, device=common.array_device(a))
    padded[:, :, p:p + H, p:p + W] = a
    return padded


def channels_last(x) -> bool:
    """Whether a numpy x (N, C, H, W) lies channels-last in memory (N, H, W, C, C order)
    and not also in C order (one channel, or 1x1 planes, are both)."""
    return x.ndim == 4 and not x.flags.c_contiguous and x.transpose(0, 2, 3, 1).flags.c_contiguous


def plain_windows_only(params) -> str | None:
    """``Strategy.outside_when`` of a strategy written for k×k windows at stride k without
    padding (the seeds' reshape forms and the kernels built on them)."""
    k, s, p = window(params)
    if s == k and p == 0:
        return None
    # One wording for every such case, so that the check's SKIPPED lines group them.
    return "written for k×k windows at stride k without padding, not overlapping or padded ones"


def validate(params) -> None:
    k, s, p = window(params)
    if p > k // 2:
        raise ValueError(f"p={p} is more than half the window k={k} (PyTorch's limit, docs/SPEC.md §1.1)")
    if k > params["H"] + 2 * p or k > params["W"] + 2 * p:
        padded = f" padded by {p}" if p else ""
        raise ValueError(f"k={k} is larger than the plane {params['H']}x{params['W']}{padded}")


def oracle(inputs, params):
    """float64 reference, in the namespace of x (numpy on the host, torch on
    x's device): the k*k elements of every window visited in row-major order,
    all windows at once, a later element taking the place of the best so far
    only when it is greater, or NaN where the best is not: the first maximum,
    and the first NaN when there is one, which is exactly docs/SPEC.md §1.1's
    rule (and ``np.argmax``'s over the window laid out as a row, what this
    oracle was first: at 64x32x128² that copied x and took 0.4-1.3 s, this
    takes about 0.5 s, on the 2-core VM)."""
    x = inputs["x"]
    k, s, p = window(params)
    xp = array_namespace(x)
    values, in_window = _first_maxima(x, k, s, p)
    h, w = shape_of(values)[2:]
    W = shape_of(x)[3]
    in_window = xp.astype(in_window, xp.int64)
    rows = xp.reshape(xp.arange(h, device=common.array_device(x)), (h, 1)) * s - p + in_window // k
    cols = xp.reshape(xp.arange(w, device=common.array_device(x)), (1, w)) * s - p + in_window % k
    return values, rows * W + cols


def _places(x, k: int, s: int, p: int):
    """Each place in the window, row-major: (its number, the (N, C, h, w) view of x's
    element there in every window (-inf in the padding), the (h, w) mask of the windows
    where that element is real, not padding; None without padding)."""
    xp = array_namespace(x)
    H, W = shape_of(x)[2:]
    h, w = _pooled_plane(H, W, k, s, p)
    device = common.array_device(x)
    padded = _padded(x, p, -math.inf) if p else x
    for place in range(k * k):
        di, dj = divmod(place, k)
        real = None
        if p:
            rows = xp.arange(h, device=device) * s - p + di
            cols = xp.arange(w, device=device) * s - p + dj
            real = xp.reshape((rows >= 0) & (rows < H), (h, 1)) & xp.reshape((cols >= 0) & (cols < W), (1, w))
        yield place, _at(padded, di, dj, h, w, s), real


def _first_maxima(x, k: int, s: int | None = None, p: int = 0):
    """Every window's first maximum (or first NaN) among its real elements and
    its row-major place in the window, in the narrowest integer type that
    holds k*k - 1. With padding, a place in the padding is never taken: a
    window's first real element is taken whatever it holds (an all -inf
    window's index), and a later one only when greater, or the first NaN."""
    s = k if s is None else s
    xp = array_namespace(x)
    device = common.array_device(x)
    has_nan = common.any_of(xp.isnan(x))  # NaN masks only where there is one (not in random inputs)
    index_type = xp.uint8 if k * k <= 1 << 8 else xp.int16 if k * k <= 1 << 15 else xp.int32
    for place, candidate, real in _places(x, k, s, p):
        if place == 0:
            values = xp.asarray(candidate, copy=True)
            in_window = xp.zeros(shape_of(values), dtype=index_type, device=device)
            has = real  # (h, w): a real element seen; without padding, every one is real
            continue
        take = candidate > values
        if has_nan:
            take |= xp.isnan(candidate) & ~xp.isnan(values)
        if real is not None:
            take = (take | ~has) & real
            has = has | real
        common.assign_where(values, take, candidate)
        common.assign_where(in_window, take, place)
    return values, in_window


def generate(params, mode: str = "random", seed: int = 0):
    """x as float64; ``adversarial``: integers in [-3, 3] (ties everywhere),
    zeros of either sign, NaN and ±inf sprinkled in, and planted windows: all
    -inf at several places (the origin, the middle, the last row and column),
    ±0.0 ties in both orders (the first maximum's sign is the answer),
    windows of subnormals of every float type (``SUBNORMAL_WINDOWS``), and one
    all-NaN window."""
    rng = np.random.default_rng(seed)
    shape = (params["N"], params["C"], params["H"], params["W"])
    if mode == "random":
        return {"x": rng.standard_normal(shape)}
    x = common.special_integers(rng, shape, (0.03, 0.06, 0.09))
    _plant_windows(x, *window(params))
    return {"x": x}


# ±0.0 ties, as {flat position in the k*k window: value}; every other element -1.
# The first maximum decides the sign: -0.0, +0.0 and -0.0 again.
ZERO_TIES = ({0: -0.0, 1: 0.0}, {0: 0.0, -1: -0.0}, {-2: -0.0, -1: 0.0})


# Windows of subnormals (docs/SPEC.md §1.1 compares values bitwise, subnormals
# included), as the first four elements of a k*k window in units of a type's
# smallest subnormal (LARGEST: its largest), every other element -1. Each is
# planted once per float type, so every dtype's check holds subnormals of its
# own type (another type's become zeros of their sign, or normal numbers). A
# backend that flushes subnormals to zero sees a window of zeros and answers
# its first element: each pattern then gives a wrong value or index.
LARGEST = "largest"
SUBNORMAL_WINDOWS = (
    (2, 6, 4, 1),  # the maximum second (1e-323, 3e-323, 2e-323, 5e-324 in float64)
    (-5, 3, 3, 1),  # a tie of subnormals: the first, at position 1
    (-0.0, -1, 0.0, 1),  # both signs beside both zeros: the maximum is the last
    (-1, -0.0, 0.0, -2),  # a negative subnormal before the zeros: -0.0 at position 1 is the maximum
    (-3, -1, -2, -1),  # all negative: the first -1 unit, at position 1
    (1, LARGEST, 2, LARGEST),  # the largest subnormal, tied: the first, at position 1
)
# k = 1: a window is one element, a subnormal of either sign.
SUBNORMAL_SINGLES = ((1,), (-1,), (LARGEST,))


def subnormal_windows(k: int) -> list[np.ndarray]:
    """The planted subnormal windows for window size ``k`` (flat, k*k long,
    float64), the types interleaved so that each gets its first patterns in
    a plane with room for only a few."""
    patterns = SUBNORMAL_WINDOWS if k > 1 else SUBNORMAL_SINGLES
    windows = []
    for pattern in patterns:
        for dtype in common.SUBNORMAL_UNIT:
            largest = common.SUBNORMAL_STEPS[dtype] - 1
            flat = np.full(k * k, -1.0)
            flat[:len(pattern)] = [common.subnormal(dtype, largest if unit == LARGEST else unit)
                                   for unit in pattern]
            windows.append(flat)
    return windows


def _plant_windows(x, k: int, s: int | None = None, p: int = 0) -> None:
    """All -inf windows at several places (each must yield the index of its own
    first real element, which is 0 only at the origin), ±0.0 ties, subnormal
    windows, where windows overlap an input that is the maximum (a number, a
    NaN, a tie) of every window covering it (``SHARED_MAXIMA``, before the
    ties), and one all-NaN block at the end of the last plane, spread over
    the planes so that they do not overwrite each other where there is room
    (in that order of priority). Windows are the case's own (stride ``s``,
    padding ``p``): a window planted marks every window overlapping it as
    used, so a later plant never breaks it; ties and subnormal patterns go
    into windows wholly inside the plane (their place in the window is the
    answer), all -inf windows into any, the padded edges' included."""
    s = k if s is None else s
    N, C, H, W = x.shape
    h, w = _pooled_plane(H, W, k, s, p)
    if h <= 0 or w <= 0:
        return
    planes = x.reshape(N * C, H, W)
    spots = list(dict.fromkeys([(0, 0), (h // 2, w // 2), (h - 1, w // 2), (h // 2, w - 1),
                                (h - 1, w - 1), (h - 1, 0), (0, w - 1)]))

    def span(i: int, size: int) -> tuple[int, int]:
        """The rows (or columns) of window ``i`` inside a plane of ``size``."""
        return max(i * s - p, 0), min(i * s - p + k, size)

    def overlapping(rows: tuple[int, int], cols: tuple[int, int]):
        """The windows (i, j) that hold any element of the block ``rows`` × ``cols``."""
        return [(i, j) for i in range(h) for j in range(w)
                if span(i, H)[0] < rows[1] and rows[0] < span(i, H)[1]
                and span(j, W)[0] < cols[1] and cols[0] < span(j, W)[1]]

    def inside(i: int, j: int) -> bool:
        return i * s - p >= 0 and j * s - p >= 0 and i * s - p + k <= H and j * s - p + k <= W

    # The NaN block (the last k rows and columns of the last plane) and every window it reaches.
    used = {(N * C - 1, i, j) for i, j in overlapping((H - k, H), (W - k, W))} if H >= k and W >= k else set()

    def slot(plane: int, spot: int, whole: bool):
        """The preferred window if free, else the spots in other planes, else any free
        window (``whole``: wholly inside the plane)."""
        order = [((plane + a) % len(planes),) + spots[(spot + a // len(planes)) % len(spots)]
                 for a in range(len(planes) * len(spots))]
        order += [(q, i, j) for q in range(len(planes)) for i in range(h) for j in range(w)]
        for candidate in order:
            if candidate not in used and (not whole or inside(*candidate[1:])):
                q, i, j = candidate
                used.update((q,) + other for other in overlapping(span(i, H), span(j, W)))
                return candidate
        return None

    def covering(r: int, c: int) -> list[tuple[int, int]]:
        """The windows (i, j) that hold input (r, c)."""
        rows = range(max(0, -(-(r + p - k + 1) // s)), min(h - 1, (r + p) // s) + 1)
        cols = range(max(0, -(-(c + p - k + 1) // s)), min(w - 1, (c + p) // s) + 1)
        return [(i, j) for i in rows for j in cols]

    def shared_input(t: int):
        """The input covered by the most windows, all free and wholly inside the plane, in the
        first plane from ``t`` on that has one; its windows' block marked used."""
        for a in range(len(planes)):
            q, best = (t + a) % len(planes), None
            for r in range(H):
                for c in range(W):
                    around = covering(r, c)
                    if len(around) >= 2 and (best is None or len(around) > len(best[1])) and all(
                            inside(i, j) and (q, i, j) not in used for i, j in around):
                        best = ((r, c), around)
            if best:
                (r, c), around = best
                rows = (around[0][0] * s - p, around[-1][0] * s - p + k)
                cols = (around[0][1] * s - p, around[-1][1] * s - p + k)
                used.update((q,) + other for other in overlapping(rows, cols))
                return q, r, c, rows, cols
        return None

    def window(where):
        q, i, j = where
        (top, bottom), (left, right) = span(i, H), span(j, W)
        return planes[q, top:bottom, left:right]

    for t in range(len(spots)):
        where = slot(t, t, whole=False)
        if where:
            window(where)[...] = -np.inf
    if s < k:
        for t, kind in enumerate(SHARED_MAXIMA):
            spot = shared_input(t)
            if spot:
                _plant_shared_maximum(planes, spot, kind)
    for t, tie in enumerate(ZERO_TIES if k > 1 else ({0: -0.0},)):
        where = slot(t + 1, t + 1, whole=True)
        if where:
            flat = np.full(k * k, -1.0)
            for position, value in tie.items():
                flat[position] = value
            window(where)[...] = flat.reshape(k, k)
    for t, flat in enumerate(subnormal_windows(k), start=len(ZERO_TIES) + 1):
        where = slot(t, t, whole=True)
        if where:
            window(where)[...] = flat.reshape(k, k)
    if H >= k and W >= k:
        x[-1, -1, -k:, -k:] = np.nan


# Where windows overlap (s < k), blocks planted around one input that every window covering it
# takes as its maximum (its gradients collide there): a 4 (above the inputs' [-3, 3]), a NaN,
# and a tie across windows (4s also at the block's first and last elements: the first window
# takes the first one, the last window the shared one, which comes first in it).
SHARED_MAXIMA = ("maximum", "nan", "tie")


def _plant_shared_maximum(planes, spot, kind: str) -> None:
    """``kind`` of ``SHARED_MAXIMA`` at ``spot``: (plane, row, col, (top, bottom), (left, right)), the
    input and the block of the windows covering it, whose NaNs and infinities become -1 first."""
    q, r, c, (top, bottom), (left, right) = spot
    block = planes[q, top:bottom, left:right]
    block[~np.isfinite(block)] = -1.0
    planes[q, r, c] = np.nan if kind == "nan" else 4.0
    if kind == "tie":
        block[0, 0] = block[-1, -1] = 4.0


def _pooled(params) -> int:
    h, w = pooled_size(params)
    return params["N"] * params["C"] * h * w


def bytes_moved(params, itemsize: int, returns: str = "values+indices") -> int:
    N, C, H, W = (params[key] for key in ("N", "C", "H", "W"))
    pooled = _pooled(params)
    index_bytes = 8 * pooled if returns == "values+indices" else 0
    return N * C * H * W * itemsize + pooled * itemsize + index_bytes


def written_buffers(params, itemsize: int, returns: str = "values+indices") -> tuple[int, ...]:
    """Each output the call allocates afresh, in bytes: the values, then the int64 indices."""
    pooled = _pooled(params)
    return (pooled * itemsize, 8 * pooled) if returns == "values+indices" else (pooled * itemsize,)


def bytes_written(params, itemsize: int, returns: str = "values+indices") -> int:
    """The part of ``bytes_moved`` written: the outputs, fresh on every call."""
    return sum(written_buffers(params, itemsize, returns))


def compare(out, ref, inputs, dtype: str, strat, params: dict) -> Verdict:
    """Values bitwise, then indices exactly (or, with ``ties="any"``, pointing at
    a maximum of their own window); both are judged, so a mismatch names every
    kind of difference it holds (a known defect excuses only its own kinds)."""
    ref_values, ref_indices = ref
    if strat.returns == "values":
        out_values, out_indices = (out[0] if isinstance(out, tuple) else out), None
    else:
        if not (isinstance(out, tuple) and len(out) == 2):
            return Verdict(status.MISMATCH, "expected (values, indices)", differences=frozenset({common.SHAPE}))
        out_values, out_indices = out
    if strat.ties == "any":
        ref_values = _pointed_maximum(out_indices, ref_values, inputs["x"])
    verdict = common.compare_bitwise("values", out_values, ref_values, dtype)
    if out_indices is None:
        return verdict
    return common.merge_verdicts(verdict, _compare_indices(out_indices, ref_indices, ref_values, inputs["x"],
                                                           strat.ties, window(params), dtype))


def _int64_indices(got, expected) -> bool:
    """Whether ``got`` is an int64 array of ``expected``'s shape (the index compare says what else it is)."""
    return common.is_array(got) and shape_of(got) == shape_of(expected) and common.dtype_name(got) == "int64"


def _compare_indices(got, expected, ref_values, x, ties: str, kernel: tuple[int, int, int], dtype: str) -> Verdict:
    if not common.is_array(got) or shape_of(got) != shape_of(expected):
        return Verdict(status.MISMATCH, f"indices: shape {shape_of(got)}, expected {shape_of(expected)}",
                       differences=frozenset({common.SHAPE}))
    if common.dtype_name(got) != "int64":
        return Verdict(status.MISMATCH, f"indices: dtype {common.dtype_name(got)}, expected int64",
                       differences=frozenset({common.DTYPE_DIFFERENCE}))
    xp = array_namespace(got, expected, x)
    if common.all_of(got == expected):  # the oracle's own indices: right under either tie rule
        return Verdict(status.OK)
    N, C, H, W = shape_of(x)
    bad = (got < 0) | (got >= H * W)
    if any_of(bad):
        return Verdict(status.MISMATCH, "indices: outside the plane; " + common.first_difference(got, expected, bad),
                       differences=frozenset({common.INDEX_OUTSIDE}))
    pointed = _pointed(x, got)
    # The window from the case's k, s and p, not from H // h: with H=8, k=3 that is 4, and an
    # index in the next window's first row would pass as this window's.
    own = _in_own_window(got, W, kernel)
    nan_window = xp.isnan(ref_values)
    # Where the window holds a NaN, any NaN *of that window* will do (libraries
    # differ); a NaN of another window would send max_unpool's NaN astray.
    nan_ok = nan_window & xp.isnan(pointed) & own
    if ties == "any":
        # Must point at an element equal to the maximum, inside its own window.
        fine = ((pointed == ref_values) & own) | nan_ok
    else:
        fine = (got == expected) | nan_ok
    if common.all_of(fine):
        return Verdict(status.OK)
    wrong = ~fine
    # The window's maximum is -inf only when all of it is -inf.
    zero_for_neg_inf = wrong & (ref_values == -math.inf) & (got == 0)
    # A window holding a subnormal: where a backend that flushes them picks another element.
    subnormal_window = wrong & ~zero_for_neg_inf & _windows_holding_subnormals(x, kernel, dtype)
    kinds = frozenset(kind for kind, mask in ((common.NEG_INF_WINDOW_INDEX_0, zero_for_neg_inf),
                                              (common.SUBNORMAL_WINDOW_INDEX, subnormal_window),
                                              (common.INDEX, wrong & ~zero_for_neg_inf & ~subnormal_window))
                      if any_of(mask))
    detail = (" (index 0 for an all -inf window away from the origin)"
              if kinds == {common.NEG_INF_WINDOW_INDEX_0} else "")
    rule = "any" if ties == "any" else "first"  # undeclared ties are held to the contract's first maximum
    return Verdict(status.MISMATCH, f"indices ({rule} ties): {common.count(wrong)} wrong{detail}; "
                   + common.first_difference(got, expected, wrong), differences=kinds)


def _pointed(x, indices):
    """The elements of x the (in-plane) flat indices point at."""
    xp = array_namespace(x, indices)
    N, C, H, W = shape_of(x)
    flat = xp.take_along_axis(xp.reshape(x, (N, C, H * W)), xp.reshape(indices, (N, C, -1)), axis=-1)
    return xp.reshape(flat, shape_of(indices))


def _windows_holding_subnormals(x, kernel: tuple[int, int, int], dtype: str):
    """(N, C, h, w): the windows with a subnormal among their real elements."""
    xp = array_namespace(x)
    k, s, p = kernel
    tiny = common.is_subnormal(x, dtype)
    N, C, H, W = shape_of(x)
    h, w = _pooled_plane(H, W, k, s, p)
    if p:
        tiny = _padded(tiny, p, False)
    found = xp.zeros((N, C, h, w), dtype=xp.bool, device=common.array_device(x))
    for di in range(k):
        for dj in range(k):
            found |= _at(tiny, di, dj, h, w, s)
    return found


def _in_own_window(flat, W: int, kernel: tuple[int, int, int]):
    """(N, C, h, w): whether each flat index lies in the window it was returned for."""
    xp = array_namespace(flat)
    k, s, p = kernel
    h, w = shape_of(flat)[2:]
    device = common.array_device(flat)
    top = xp.reshape(xp.arange(h, device=device) * s - p, (h, 1))
    left = xp.reshape(xp.arange(w, device=device) * s - p, (1, w))
    rows, cols = flat // W, flat % W
    return (rows >= top) & (rows < top + k) & (cols >= left) & (cols < left + k)


def _pointed_maximum(indices, ref_values, x):
    """With ``ties="any"`` the value may be the bits of whichever maximum the
    index points at (-0.0 or +0.0 when zeros tie); elsewhere, and for an index
    that is no maximum (judged by the index compare), the first maximum's."""
    if not _int64_indices(indices, ref_values):
        return ref_values
    xp = array_namespace(indices, ref_values, x)
    H, W = shape_of(x)[2:]
    if any_of((indices < 0) | (indices >= H * W)):
        return ref_values
    pointed = _pointed(x, indices)
    return xp.where(pointed == ref_values, pointed, ref_values)


def check_cases():
    # Divisible and not, k=1, k equal to the plane, odd k, tall and wide planes;
    # rows of more than 128 outputs (a Triton tile's width, so several column
    # blocks), and bands past a numba chunk's scratch.
    return [dict(N=2, C=3, H=8, W=8, k=2), dict(N=2, C=3, H=7, W=9, k=2),
            dict(N=1, C=2, H=10, W=11, k=3), dict(N=2, C=2, H=5, W=5, k=1),
            dict(N=1, C=1, H=4, W=4, k=4), dict(N=3, C=2, H=6, W=13, k=5),
            dict(N=1, C=1, H=31, W=7, k=3), dict(N=1, C=2, H=5, W=601, k=2),
            dict(N=2, C=1, H=9, W=2500, k=3), *window_cases()]


def window_cases():
    """Overlapping and padded windows (docs/SPEC.md §1.1): ResNet's stem (k=3, s=2, p=1) on an
    odd plane, stride 1 (every input in up to k² windows), a wide pad (p = k // 2 at k=5),
    overlap without padding, and gaps (s > k: inputs no window reads)."""
    return [dict(N=2, C=3, H=9, W=9, k=3, s=2, p=1), dict(N=1, C=2, H=8, W=11, k=3, s=1, p=1),
            dict(N=1, C=4, H=20, W=21, k=5, s=3, p=2), dict(N=2, C=2, H=7, W=7, k=2, s=1),
            dict(N=1, C=2, H=9, W=10, k=2, s=3)]



OP = register_operator(Operator(
    name="maxpool2d", doc=__doc__,
    params=(ParamSpec("N"), ParamSpec("C"), ParamSpec("H"), ParamSpec("W"),
            ParamSpec("k", doc="window (and stride where s is not given)"),
            ParamSpec("s", doc="stride (default k)", required=False),
            ParamSpec("p", minimum=0, doc="padding (default 0, at most k // 2)", required=False)),
    generate=generate, oracle=oracle, bytes_moved=bytes_moved, bytes_written=bytes_written,
    written_buffers=written_buffers, compare=compare, validate=validate, reference="torch_max_pool2d_indices",
    layout_keys=("x",),
    layout_shapes=lambda params: {"x": tuple(params[key] for key in ("N", "C", "H", "W"))},
    check_cases=check_cases, outputs=("values+indices", "values"), any_namespace=True,
    default_outside_when=plain_windows_only,
    library_call=("torch_max_pool2d_indices",)))  # F.max_pool2d(x, k, return_indices=True)


# ------------------------------------------------------------- gradient (docs/SPEC.md §1.5)
def grad_oracle(inputs, grad, params):
    """float64 backward, in the namespace of x: zeros, and each window's
    gradient at the forward oracle's own index (the first maximum, the first
    NaN of a NaN window, the first real element of an all -inf window); rows
    and columns no window reaches get zero. The scatter itself, not the
    derivative of a strategy. Where windows overlap (s < k) an input may be
    the maximum of several, and receives their sum (docs/SPEC.md §1.5),
    added in place order."""
    x = inputs["x"]
    kernel = window(params)
    _, in_window = _first_maxima(x, *kernel)
    return _scatter(in_window, grad, shape_of(x), kernel)


def _scatter(in_window, sent, x_shape, kernel: tuple[int, int, int]):
    """(N, C, H, W) float64: each window's value of ``sent`` (N, C, h, w) at the
    element ``in_window`` (its place in the window), places taken in row-major
    order; what lands in the padding is dropped. Where windows do not overlap
    (s >= k) each value is written, not added, so it keeps its bits (-0.0 too)."""
    xp = array_namespace(in_window, sent)
    k, s, p = kernel
    N, C, H, W = x_shape
    h, w = shape_of(in_window)[2:]
    landed = common.float64_zeros(xp, (N, C, H + 2 * p, W + 2 * p), in_window)
    for place in range(k * k):
        at = _at(landed, *divmod(place, k), h, w, s)
        value = xp.where(in_window == place, sent, 0.0)
        if s >= k:
            at[...] = value
        else:
            with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, as every order adds it
                at += value
    if s < k:  # a NaN made by adding (inf - inf) has the bits of the machine's instruction: one NaN for all
        landed = xp.where(xp.isnan(landed), math.nan, landed)
    return xp.asarray(landed[:, :, p:p + H, p:p + W], copy=True) if p else landed


# Hostile gradients for the windows whose maxima collide (``generate_grad``, adversarial, s < k):
# each group's values go to windows sending to one input, one group per such input in turn. ``L``
# is a float type's largest finite value (the sum overflows in that type in any order; with -L after
# it, in some orders only), ``S`` its smallest subnormal (the sum is exact, and flushed by a
# backend that flushes), NaN and infinities (NaN + anything, inf - inf: NaN in any order).
LARGEST_SUM, CANCELLED_SUM, SUBNORMAL_SUM = "L+L", "L+1-L", "S+2S"
COLLIDING_GRADIENTS = ((math.nan, 5.0), (math.inf, -math.inf), LARGEST_SUM, SUBNORMAL_SUM, (math.inf, 7.0),
                       CANCELLED_SUM, (-0.0, -0.0))


def _colliding_gradients(kind, dtype: str) -> tuple:
    if not isinstance(kind, str):
        return kind
    largest, smallest = common.largest_finite(dtype), float(common.subnormal(dtype, 1))
    return {LARGEST_SUM: (largest, largest), CANCELLED_SUM: (largest, 1.0, -largest),
            SUBNORMAL_SUM: (smallest, 2 * smallest)}[kind]


def generate_grad(params, mode: str = "random", seed: int = 0):
    """grad_values, the shape of the values (common.gradient_values). With
    overlapping windows, adversarial: the windows whose maxima (by the oracle,
    on the inputs ``generate`` makes with the same seed) collide on one input
    get ``COLLIDING_GRADIENTS``, a group per input, every kind for every
    float type in turn."""
    rng = np.random.default_rng((seed, 1))
    shape = (params["N"], params["C"], *pooled_size(params))
    grad = common.gradient_values(rng, shape, mode, special=True)
    k, s, _ = window(params)
    if mode != "random" and s < k:
        _, indices = oracle(generate(params, mode, seed), params)
        groups = _colliding_windows(indices, params["H"] * params["W"])
        kinds = [_colliding_gradients(kind, dtype) for dtype in reversed(common.SUBNORMAL_UNIT)
                 for kind in COLLIDING_GRADIENTS]
        kinds = list(dict.fromkeys(kinds))  # the type-free kinds once
        flat = grad.reshape(-1)
        for group in groups:
            fitting = next((kind for kind in kinds if len(kind) <= len(group)), None)
            if fitting is None:
                continue
            kinds.remove(fitting)
            flat[group[:len(fitting)]] = fitting
    return grad


def _colliding_windows(indices, plane_size: int) -> list[np.ndarray]:
    """The flat numbers of the windows sending to one input, by their forward
    ``indices`` (numpy, flat in each plane of ``plane_size``), for each input
    that two or more send to, in the inputs' order."""
    N, C = indices.shape[:2]
    landing = (indices + plane_size * np.arange(N * C).reshape(N, C, 1, 1)).reshape(-1)
    order = np.argsort(landing, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(landing[order]) != 0])
    return [group for group in np.split(order, starts[1:]) if len(group) >= 2]


def grad_bytes(params, itemsize: int) -> int:
    """grad_values and the saved int64 indices read, grad_x written."""
    N, C, H, W = (params[key] for key in ("N", "C", "H", "W"))
    pooled = _pooled(params)
    return pooled * itemsize + pooled * 8 + N * C * H * W * itemsize


def grad_compare(out, ref, inputs, grad, dtype: str, strat, params: dict) -> Verdict:
    """grad_x (docs/SPEC.md §1.5): bitwise where one window's gradient lands (a
    scatter moves values, it computes none); where windows overlap and several
    land on one input, their sum as any order of adding may give it
    (``_accepts``). A gradient lands on the forward's index: the first maximum
    (with ``ties="any"``, any maximum) or any NaN of a NaN window."""
    exact = common.compare_gradient_bitwise("grad_x", out, ref, dtype)
    if exact.status == status.OK:  # the reference itself: nothing is left for the rules to explain
        return exact
    k, s, p = kernel = window(params)
    expected, note = _gradient_as_it_may_land(out, ref, inputs["x"], grad, strat.ties, kernel, dtype)
    verdict = exact if expected is ref else common.compare_gradient_bitwise("grad_x", out, expected, dtype)
    if verdict.status != status.MISMATCH:
        return verdict
    if s == k and p == 0 and _neg_inf_windows_dropped_but_the_origins(out, expected, inputs["x"], k, dtype):
        return replace(verdict, message=verdict.message + " (all -inf windows' gradients lost: their index was 0)",
                       differences=frozenset({common.NEG_INF_WINDOW_GRAD_0}))
    return replace(verdict, message=verdict.message + note) if note else verdict


# A window's gradient may land on any of its NaNs or tied maxima: the arrangements of such windows
# searched, per group of them that share inputs, before the oracle's own choice is held to instead.
ARRANGEMENTS_SEARCHED = 20_000
SUBSETS_UP_TO = 12  # free windows reaching one element (k = 3 at stride 1: 9), whose 2**n subsets are tried


def _gradient_as_it_may_land(out, ref, x, grad, ties: str, kernel: tuple[int, int, int], dtype: str):
    """(what ``out`` is compared with bitwise, a note for a mismatch's message):
    the reference as ``dtype`` holds it, moved where the contract leaves the
    place open, and ``out`` itself wherever ``_accepts`` allows it. Only the
    inputs where ``out`` differs from the reference, and those a free window
    may send to, are looked at (``_landed_at``): a case of a real network's
    size differs at a few per cent of its inputs. Open places: a NaN window's
    gradient may land on any NaN of the window, and with ``ties="any"`` a tied
    window's on any of its maxima; the windows free to choose are arranged
    (``_arranged``) to explain ``out``, and held to the oracle's choice where
    no arrangement does."""
    if not common.is_array(out) or shape_of(out) != shape_of(ref):
        return ref, ""
    xp = array_namespace(out, ref, x, grad)
    k, s, p = kernel
    values, in_window = _first_maxima(x, k, s, p)
    free = _free_windows(x, values, kernel, ties)
    if free is None and s >= k:
        return ref, ""
    device = common.array_device(out)
    out64 = xp.reshape(xp.astype(out, xp.float64), (-1,))
    expected = xp.reshape(common.round_to_dtype(ref, dtype), (-1,))
    suspects = xp.nonzero(~((out64 == expected) | (xp.isnan(out64) & xp.isnan(expected))))[0]
    note = " (where windows overlap, an input several send to is compared with their sum within its rounding)" \
        if s < k else ""
    arranged = None
    if free is not None:
        arranged, given_up = _arranged(out64, xp.reshape(ref, (-1,)), grad, in_window, free, kernel, dtype,
                                       shape_of(x))
        note = given_up + note
        elements = xp.asarray(arranged[0], device=device)
        others = xp.ones(shape_of(out64), dtype=xp.bool, device=device)
        others[elements] = False
        suspects = xp.concat([suspects[others[suspects]], elements])  # each input once, the arranged last
    if not suspects.shape[0]:
        return xp.reshape(expected, shape_of(ref)), note
    sums = xp.reshape(ref, (-1,))[suspects]
    hits, bound = _landed_at(suspects, in_window, grad, shape_of(x), kernel)
    if arranged is not None:
        elements, moved = arranged
        tail = slice(int(suspects.shape[0]) - len(elements), None)
        sums[tail], hits[tail], bound[tail] = (xp.asarray(values, device=device) for values in moved)
    expected = xp.asarray(expected, copy=True)
    allowed = _accepts(out64[suspects], sums, hits, bound, dtype)
    expected[suspects] = xp.where(allowed, out64[suspects], common.round_to_dtype(sums, dtype))
    return xp.reshape(expected, shape_of(ref)), note


def _landed_at(flat, in_window, grad, x_shape, kernel: tuple[int, int, int], shut=None):
    """(hits, bound) at the inputs ``flat`` (flat over (N, C, H, W)): how many
    windows' indices (``in_window``, the place in each window) are that input,
    and the sum of their gradients' finite magnitudes; ``shut`` (N, C, h, w),
    when given: only those windows' gradients, and (sums) their sum too. The
    windows covering an input are at most ceil(k/s)² a side; each is read
    once, whatever the case's size."""
    xp = array_namespace(in_window, grad)
    k, s, p = kernel
    N, C, H, W = x_shape
    h, w = shape_of(in_window)[2:]
    plane, rest = flat // (H * W), flat % (H * W)
    row, col = rest // W, rest % W
    places, sent = xp.reshape(in_window, (-1,)), xp.reshape(grad, (-1,))
    counted = None if shut is None else xp.reshape(shut, (-1,))
    zeros = xp.zeros(shape_of(flat), dtype=xp.float64, device=common.array_device(grad))
    hits, bound, sums = zeros, xp.asarray(zeros, copy=True), xp.asarray(zeros, copy=True)
    span = -(-k // s)
    for di in range(span):
        i = (row + p) // s - di
        for dj in range(span):
            j = (col + p) // s - dj
            inside = ((i >= 0) & (i < h) & (j >= 0) & (j < w) & (row + p - i * s < k) & (col + p - j * s < k))
            window = (plane * h + xp.clip(i, 0, h - 1)) * w + xp.clip(j, 0, w - 1)
            place = (row + p - i * s) * k + (col + p - j * s)
            hit = inside & (xp.astype(places[window], xp.int64) == place)
            if counted is not None:
                hit = hit & counted[window]
            value = sent[window]
            with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, and overflow, as adding gives
                hits = hits + xp.astype(hit, xp.float64)
                bound = bound + xp.where(hit & xp.isfinite(value), xp.abs(value), 0.0)
                if counted is not None:
                    sums = sums + xp.where(hit, value, 0.0)
    return (hits, bound) if counted is None else (sums, hits, bound)


def _free_windows(x, values, kernel: tuple[int, int, int], ties: str):
    """(free, allowed): the (N, C, h, w) windows whose gradient may land on any of
    two or more elements (a NaN window's NaNs; with ``ties="any"``, a tied
    window's maxima), and each place's (N, C, h, w) mask of where it may, in
    place order; None where there is no such window."""
    xp = array_namespace(x, values)
    nan_window = xp.isnan(values)
    if ties != "any" and not any_of(nan_window):
        return None
    allowed, count = [], None
    for _, element, real in _places(x, *kernel):
        here = nan_window & xp.isnan(element)
        if ties == "any":
            here = here | (~nan_window & (element == values))
        if real is not None:
            here = here & real
        allowed.append(here)
        count = xp.astype(here, xp.int32) if count is None else count + xp.astype(here, xp.int32)
    free = count >= 2
    return (free, allowed) if any_of(free) else None


def _accepts(out, sums, hits, bound, dtype: str):
    """Where ``out`` (float64) is a gradient the contract allows: ``sums``
    itself (NaN for NaN, either zero for a zero), or, where ``hits`` >= 2
    windows' gradients landed, their sum as adding them in any order in
    ``dtype`` or wider may round it: within docs/SPEC.md §1.5's relative
    bound of the exact sum, or within n·u·Σ|g| (the error of adding n terms
    at unit roundoff u, ``bound`` = Σ|g| of the finite ones); and, where
    Σ|g| passes the dtype's largest value (some order overflows), ±inf, or
    NaN, unless the exact sum is NaN, which every order gives."""
    xp = array_namespace(out, sums)
    record = dtype_record(dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, inf * 0 on numpy: masked below
        same = (out == sums) | (xp.isnan(out) & xp.isnan(sums))
        tolerance = xp.maximum(record.rel_tol * xp.abs(sums), hits * (record.eps / 2) * bound)
        close = xp.isfinite(sums) & xp.isfinite(out) & (xp.abs(out - sums) <= tolerance)
        overflowed = ((bound > record.largest) & ~xp.isfinite(out) & ~xp.isnan(sums)
                      & (xp.isnan(out) | xp.isfinite(sums) | (out == sums)))
        return same | ((hits >= 2) & (close | overflowed))


def _arranged(out64, ref, grad, in_window, free, kernel, dtype, x_shape):
    """((elements, (sums, hits, bound)), note): the inputs the free windows may
    send to (flat, numpy) and what lands there once the free windows'
    gradients are moved to where an arrangement explains ``out64`` (flat):
    each free window takes one of its allowed elements, searched per group of
    free windows sharing elements (``_search``). A group no arrangement
    explains, or with more than ``ARRANGEMENTS_SEARCHED`` to try, keeps the
    oracle's choice (``ref``, flat, and the oracle's landings)."""
    xp = array_namespace(out64, grad)
    free_mask, allowed = free
    k, s, p = kernel
    C, H, W = x_shape[1:]
    device = common.array_device(out64)
    # The free windows on the host: where they are, their gradients and their allowed elements.
    n, c, i, j = (np.asarray(to_numpy(axis)) for axis in xp.nonzero(free_mask))
    sent = np.asarray(to_numpy(grad[free_mask]), dtype=np.float64)
    places = np.stack([np.asarray(to_numpy(mask[free_mask])) for mask in allowed])  # (k*k, windows)
    candidates = []
    for t in range(len(sent)):
        di, dj = np.divmod(np.flatnonzero(places[:, t]), k)
        rows, cols = i[t] * s - p + di, j[t] * s - p + dj
        candidates.append(((n[t] * C + c[t]) * H + rows) * W + cols)
    elements = np.unique(np.concatenate(candidates))
    where = xp.asarray(elements, device=device)
    fixed = _landed_at(where, in_window, grad, x_shape, kernel, shut=~free_mask)
    gathered = [np.asarray(to_numpy(a), dtype=np.float64) for a in (out64[where], *fixed)]
    local = [np.searchsorted(elements, cands) for cands in candidates]
    results = [np.asarray(to_numpy(ref[where]), dtype=np.float64).copy(),
               *(np.asarray(to_numpy(a), dtype=np.float64).copy() for a in _landed_at(where, in_window, grad,
                                                                                     x_shape, kernel))]
    given_up = 0
    for group in _groups(local):
        found = _search([local[t] for t in group], sent[group], gathered, dtype)
        if found is None:
            given_up += len(group)
            continue
        touched = np.unique(np.concatenate([local[t] for t in group]))
        for result, values in zip(results, found):
            result[touched] = values[touched]
    note = (f" ({given_up} windows free to send to any of their NaNs or maxima are held to the oracle's choice: "
            f"no arrangement of them found explains the output)") if given_up else ""
    return (elements, tuple(results)), note


def _groups(candidates: list[np.ndarray]) -> list[np.ndarray]:
    """The windows (numbers into ``candidates``) in groups that share an allowed
    element, transitively: each group's arrangement is searched on its own."""
    parent = list(range(len(candidates)))

    def root(t: int) -> int:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    owner: dict[int, int] = {}
    for t, cands in enumerate(candidates):
        for element in cands.tolist():
            if element in owner:
                parent[root(t)] = root(owner[element])
            else:
                owner[element] = t
    groups: dict[int, list[int]] = {}
    for t in range(len(candidates)):
        groups.setdefault(root(t), []).append(t)
    return [np.array(group) for group in groups.values()]


def _search(candidates: list[np.ndarray], sent: np.ndarray, gathered: list[np.ndarray], dtype: str):
    """One arrangement of a group of free windows (each sends ``sent`` to one of its
    ``candidates``, numbers into ``gathered``'s elements) under which every
    element holds what ``_accepts`` allows; ``gathered`` is (out, sums, hits,
    bound) of the other windows' gradients there. Each element's subsets of
    the free windows that may reach it are tried first on their own (which of
    them sum to what ``out`` holds there); then one subset per element is
    chosen, so that every window is in exactly one, depth first, the element
    with the fewest subsets left first (an exact cover). Returns (sums, hits,
    bound) over ``gathered``'s elements, or None: no arrangement, an element
    reachable by more than ``SUBSETS_UP_TO`` free windows, or more than
    ``ARRANGEMENTS_SEARCHED`` choices tried."""
    out, sums, hits, bound = (np.array(a, copy=True) for a in gathered)
    reaching: dict[int, list[int]] = {}
    for t, cands in enumerate(candidates):
        for element in cands.tolist():
            reaching.setdefault(element, []).append(t)
    if max(len(windows) for windows in reaching.values()) > SUBSETS_UP_TO:
        return None
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf and the like: NaN, as the sums hold them
        options = _options(reaching, out, sums, hits, bound, sent, dtype)
    if options is None:
        return None
    every = (1 << len(candidates)) - 1
    chosen: dict[int, tuple] = {}
    tried = 0

    def cover(used: int, open_elements: frozenset) -> bool:
        nonlocal tried
        if not open_elements:
            return used == every
        fewest = None
        for element in open_elements:
            fits = [option for option in options[element] if not option[0] & used]
            if not fits:
                return False
            if fewest is None or len(fits) < len(fewest[1]):
                fewest = (element, fits)
        element, fits = fewest
        rest = open_elements - {element}
        for option in fits:
            tried += 1
            if tried > ARRANGEMENTS_SEARCHED:
                return False
            now = used | option[0]
            # a window this element leaves out must still have an element to go to
            if any(not (now >> t) & 1 and not rest.intersection(candidates[t].tolist())
                   for t in reaching[element]):
                continue
            chosen[element] = option
            if cover(now, rest):
                return True
        chosen.pop(element, None)
        return False

    if not cover(0, frozenset(reaching)):
        return None
    for element, (_, total, count, reach) in chosen.items():
        sums[element], hits[element], bound[element] = total, count, reach
    return sums, hits, bound


def _options(reaching: dict, out, sums, hits, bound, sent, dtype: str) -> dict | None:
    """For each element, the subsets of the free windows ``reaching`` it whose
    gradients, added to what the other windows sent there, ``_accepts`` allows
    there: [(the windows as bits, sums, hits, bound)]; None where an element has none."""
    magnitude = np.where(np.isfinite(sent), np.abs(sent), 0.0)
    options = {}
    for element, windows in reaching.items():
        picked = (np.arange(1 << len(windows))[:, None] >> np.arange(len(windows))) & 1 == 1
        total = sums[element] + np.where(picked, sent[windows], 0.0).sum(axis=1)
        count = hits[element] + picked.sum(axis=1)
        reach = bound[element] + np.where(picked, magnitude[windows], 0.0).sum(axis=1)
        fine = np.flatnonzero(_accepts(np.full(len(total), out[element]), total, count, reach, dtype))
        if not len(fine):
            return None
        options[element] = [(sum(1 << windows[i] for i in np.flatnonzero(picked[f]).tolist()),
                             total[f], count[f], reach[f]) for f in fine.tolist()]
    return options


def _windows(a, k: int):
    """(N, C, h, w, k*k): every window of the crop as a row, row-major."""
    xp = array_namespace(a)
    N, C, H, W = shape_of(a)
    h, w = H // k, W // k
    blocks = xp.reshape(a[:, :, :h * k, :w * k], (N, C, h, k, w, k))
    return xp.reshape(xp.permute_dims(blocks, (0, 1, 2, 4, 3, 5)), (N, C, h, w, k * k))


def _neg_inf_windows_dropped_but_the_origins(out, ref, x, k: int, dtype: str) -> bool:
    """Whether ``out`` is the reference gradient but for the gradients of the
    all -inf windows away from the plane's origin, which are missing: what
    torch's CUDA channels-last backward does with forward indices of 0 for
    every all -inf window. That backward is a gather: each input element sums
    the gradients of the windows covering it whose index is that element.
    Index 0 lies only in the origin's window, so every other all -inf
    window's gradient lands nowhere, and the origin's window's (index 0 is its
    first element, where the oracle puts it) lands right. Everything else is
    judged as ``compare_gradient_bitwise`` judges it."""
    if not common.is_array(out) or shape_of(out) != shape_of(ref):
        return False
    xp = array_namespace(out, ref, x)
    N, C, H, W = shape_of(x)
    h, w = H // k, W // k
    lost = xp.all(_windows(x, k) == -math.inf, axis=-1)  # (N, C, h, w)
    lost[:, :, 0, 0] = False  # the origin's window holds index 0
    if not any_of(lost):
        return False
    first = xp.zeros((N, C, H, W), dtype=xp.bool, device=common.array_device(x))
    first[:, :, :h * k:k, :w * k:k] = lost
    expected = xp.where(first, 0.0, xp.astype(ref, xp.float64))
    return common.compare_gradient_bitwise("grad_x", out, expected, dtype).status == status.OK


def values_of(output):
    """The differentiable part of a strategy's output: the values (the
    indices are integers), whether it returns both or values only."""
    return output[0] if isinstance(output, (tuple, list)) else output


def grad_bytes_written(params, itemsize: int) -> int:
    """grad_x, the size of x."""
    return math.prod(params[key] for key in ("N", "C", "H", "W")) * itemsize


OP.gradient = Gradient(input="x", name="grad_values", generate=generate_grad, oracle=grad_oracle,
                       bytes_moved=grad_bytes, compare=grad_compare, output=values_of,
                       bytes_written=grad_bytes_written)


def seed_update_grad_input(inputs, params):
    """The explicit backward of ``seed_loops``, in the seed's own style: the
    seed's ``MaxPool2d`` keeps a ``gradInput``; its ``updateGradInput`` loops
    as ``updateOutput`` does, 4 deep, one interpreted iteration per window
    (≈ N·C·H·W/k² Python steps), writing each window's gradient at the
    (row, col) its ``self.index`` stored (here unravelled once from the flat
    indices, before the loops). It is the baseline of "× the seed" in the
    backward modes. Source: seed 000's module, its backward written in its style."""
    kernel = params["k"]
    x_shape = inputs["x"].shape

    def backward(saved, gradOutput):
        _, flat = saved
        N, C, H, W = x_shape
        index = np.stack(np.unravel_index(flat, (H, W)), axis=-1)
        gradInput = np.zeros(x_shape, dtype=gradOutput.dtype)
        for i in range(N):
            for j in range(C):
                for k in range(H // kernel):
                    for m in range(W // kernel):
                        row, col = index[i, j, k, m]
                        gradInput[i, j, row, col] = gradOutput[i, j, k, m]
        return gradInput

    return backward


def numpy_scatter_backward(inputs, params):
    """A vectorised numpy backward: ``np.put_along_axis`` of the gradient
    into a zeroed (N, C, H·W) at the forward's flat indices; one zero fill
    and one scatter (a strided gradient is copied by the reshape). Where
    windows overlap (s < k) two windows may send to one input: ``np.add.at``
    sums them there (in the gradient's dtype)."""
    N, C, H, W = inputs["x"].shape
    k, s, _ = window(params)

    def backward(saved, grad):
        _, indices = saved
        grad_x = np.zeros((N, C, H * W), dtype=grad.dtype)
        if s >= k:
            np.put_along_axis(grad_x, indices.reshape(N, C, -1), grad.reshape(N, C, -1), axis=-1)
        else:
            np.add.at(grad_x, (np.arange(N)[:, None, None], np.arange(C)[None, :, None], indices.reshape(N, C, -1)),
                      grad.reshape(N, C, -1))
        return grad_x.reshape(N, C, H, W)

    return backward


def numba_scatter_backward(inputs, params):
    """The numba backward, for every window. For a contiguous x
    (``kernels_numba.maxpool2d_backward``): per plane, zeroed and the
    gradients added at their indices in window order by the plane's one
    thread, so colliding windows race with nothing; an index outside its
    plane is an error, one inside it lands where it points (as in torch's
    backward). For a channels-last x, a gather vectorised across the channels
    (``kernels_numba.maxpool2d_nhwc_backward``), grad_x channels-last, which
    visits only the windows covering each element. Compiled here for the
    case's layout."""
    from impls import kernels_numba

    x = inputs["x"]
    k, s, p = window(params)
    N, C, H, W = x.shape
    nhwc = channels_last(x)
    gather = kernels_numba.maxpool2d_nhwc_backward(k, s, p) if nhwc else None

    def backward(saved, grad):
        _, indices = saved
        if nhwc:  # the gradient and indices as the forward left them; another layout is copied here
            grad_x = np.empty((N, H, W, C), dtype=grad.dtype)
            gather(np.ascontiguousarray(grad.transpose(0, 2, 3, 1)),
                   np.ascontiguousarray(indices.transpose(0, 2, 3, 1)), grad_x)
            return grad_x.transpose(0, 3, 1, 2)
        grad_x = np.empty(x.shape, dtype=grad.dtype)
        h, w = grad.shape[2:]
        bad = kernels_numba.maxpool2d_backward(grad.reshape(N * C, h, w), indices.reshape(N * C, h, w),
                                               grad_x.reshape(N * C, H * W))
        if bad:
            raise ValueError(f"indices: {bad} outside their own plane")
        return grad_x

    return backward


def triton_gather_backward(inputs, params):
    """The Triton backward, a gather: each grad_x element reads the forward
    indices of the windows covering it and keeps the gradients of those whose
    index is its own; no zero fill, no atomics, grad_x written once, cropped
    rows and columns 0. Valid because max-pooling's indices lie in their own
    windows. For k×k windows at stride k, one window covers each element:
    maxunpool's kernel (``kernels_triton.unpool_gather``). Where windows
    overlap, up to ceil(k/s)² do, and their gradients are summed in float32
    in a fixed order (``kernels_triton.maxpool2d_backward``). A strided
    gradient is copied first."""
    from impls import kernels_triton

    shape = tuple(inputs["x"].shape)
    k, s, p = window(params)

    def backward(saved, grad):
        _, indices = saved
        if s != k or p:
            return kernels_triton.maxpool2d_backward(grad, indices, shape, k, s, p)
        return kernels_triton.unpool_gather(grad, indices, shape, (k, k))

    return backward


VALUES_ONLY = ("it returns the values only: no indices are saved for the backward to scatter the gradient to "
               "(docs/SPEC.md §1.5 scatters to the forward's indices)")


def _cropped(x, k):
    h, w = x.shape[-2] // k, x.shape[-1] // k
    return x[..., :h * k, :w * k], h, w


# ------------------------------------------------------------- strategies
@strategy("maxpool2d", backend="numpy", source=f"{SEED} MaxPool2d.updateOutput",
          **INDICES_FIRST_TIE, baseline=True, backward=seed_update_grad_input)
def seed_loops(inputs, params):
    """The question's 4-deep python loop: ``M.max()`` and
    ``unravel_index(M.argmax())`` per window, the (row, col) pair stored into
    an int32 (N, C, h, w, 2) array as the seed does. One interpreted iteration
    per window (≈ N·C·H·W/k² numpy calls); after the loops, one vectorised
    step turns the pairs into the flat ``row*W + col`` docs/SPEC.md §1.1 asks for. The
    output takes x's dtype (the seed's ``np.zeros`` is float64)."""
    x, kernel = inputs["x"], params["k"]

    def run():
        N, C, H, W = x.shape
        output = np.zeros((N, C, H // kernel, W // kernel), dtype=x.dtype)
        index = np.zeros((N, C, H // kernel, W // kernel, 2), dtype="int32")
        for i in range(N):
            for j in range(C):
                for k in range(0, H - kernel + 1, kernel):
                    for m in range(0, W - kernel + 1, kernel):
                        M = x[i, j, k:k + kernel, m:m + kernel]
                        output[i, j, k // kernel, m // kernel] = M.max()
                        index[i, j, k // kernel, m // kernel] = np.array(np.unravel_index(M.argmax(), M.shape)) + np.array((k, m))
        return output, index[..., 0].astype(np.int64) * W + index[..., 1]

    return run


@strategy("maxpool2d", backend="numpy", source=f"{SEED} update_output_1", returns="values",
          no_backward=VALUES_ONLY)
def seed_loop_max(inputs, params):
    """The answer's values-only loop, the one its "~20× faster" is measured
    against: ``M.max()`` per window over the crop, no indices; batched over N
    and C like the question's loop (the answer drops those axes "for clarity").
    One interpreted iteration per window."""
    x, kernel = inputs["x"], params["k"]

    def run():
        N, C, H, W = x.shape
        output = np.zeros((N, C, H // kernel, W // kernel), dtype=x.dtype)
        for i in range(N):
            for j in range(C):
                plane = x[i, j]
                for k in range(0, H - kernel + 1, kernel):
                    for m in range(0, W - kernel + 1, kernel):
                        M = plane[k:k + kernel, m:m + kernel]
                        output[i, j, k // kernel, m // kernel] = M.max()
        return output

    return run


@strategy("maxpool2d", backend="numpy", source=f"{SEED} update_output_2",
          returns="values", no_backward=VALUES_ONLY)
def seed_reshape_max(inputs, params):
    """The answer's vectorised values-only version: crop, max over runs of k
    along W, then max over k rows. Two reductions, one copy of the crop when
    it is not contiguous; no indices."""
    x, kernel = inputs["x"], params["k"]

    def run():
        output, pool_h, pool_w = _cropped(x, kernel)
        N, C = x.shape[:2]
        output = output.reshape((-1, kernel)).max(axis=1)
        output = output.reshape((N, C, pool_h, kernel, pool_w)).max(axis=3)
        return output

    return run


@strategy("maxpool2d", backend="numpy", source=f"{SEED} update_output_3",
          **INDICES_FIRST_TIE, backward=numpy_scatter_backward)
def seed_reshape_argmax(inputs, params):
    """The answer's two-stage argmax on a 2-D array, as written, with the
    N·C cropped planes stacked as rows (a view when nothing is cropped):
    argmax over runs of k along W, ``unravel_index`` into (row, col) and a
    gather, then argmax over the k rows and a second gather of both index
    arrays through a selector. Several full-size int64 index arrays, ~10× the
    bytes of the input; then row % (h·k) and col give the flat index."""
    x, kernel = inputs["x"], params["k"]

    def run():
        N, C, H, W = x.shape
        cropped, pool_h, pool_w = _cropped(x, kernel)
        input_h = N * C * pool_h * kernel  # the stacked planes' rows: the seed's input_h
        output = cropped.reshape((input_h, pool_w * kernel))
        stacked_pool_h = input_h // kernel
        # calculate max along second axis
        output_tmp = output.reshape((-1, kernel))
        output_indices = output_tmp.argmax(axis=1)
        output_indices += np.arange(output_indices.shape[0]) * kernel
        output_indices = np.unravel_index(output_indices, output.shape)
        output_tmp = output[output_indices]
        # calculate max along first axis
        output_tmp = output_tmp.reshape((stacked_pool_h, kernel, pool_w))
        output_indices_selector = (kernel * pool_w * np.arange(stacked_pool_h).reshape(stacked_pool_h, 1))
        output_indices_selector = output_indices_selector.repeat(pool_w, axis=1)
        output_indices_selector += pool_w * output_tmp.argmax(axis=1)
        output_indices_selector += np.arange(pool_w)
        output_indices_selector = output_indices_selector.flatten()
        output_indices = (output_indices[0][output_indices_selector],
                          output_indices[1][output_indices_selector])
        values = output[output_indices].reshape(N, C, pool_h, pool_w)
        flat = ((output_indices[0] % (pool_h * kernel)) * W + output_indices[1]).reshape(N, C, pool_h, pool_w)
        return values, flat

    return run


@strategy("maxpool2d", backend="numpy", **INDICES_FIRST_TIE, backward=numpy_scatter_backward,
          outside_when=every_case)
def numpy_sliding_window(inputs, params):
    """Added: ``sliding_window_view`` strided by s gives a zero-copy
    (N, C, h, w, k, k) view; one reshape copies the windows into rows, one
    argmax, one gather. Reads x once, writes a k²-wide copy once (with
    padding, x is first copied into a -inf border, inside the call). An all
    -inf window's argmax may be a place in the padding: its index is then the
    window's first real element, as the contract asks."""
    x = inputs["x"]
    k, s, p = window(params)
    N, C, H, W = x.shape
    h, w = _pooled_plane(H, W, k, s, p)
    first_real = np.maximum(np.arange(h) * s - p, 0)[:, None] * W + np.maximum(np.arange(w) * s - p, 0)[None, :]

    def run():
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf) if p else x
        views = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
        windows = _at(views, 0, 0, h, w, s).reshape(N, C, h, w, k * k)
        in_window = windows.argmax(axis=-1)
        values = np.take_along_axis(windows, in_window[..., None], axis=-1)[..., 0]
        rows = np.arange(h)[:, None] * s - p + in_window // k
        cols = np.arange(w)[None, :] * s - p + in_window % k
        flat = rows * W + cols
        return values, (np.where(np.isneginf(values), first_real, flat) if p else flat)

    return run


@strategy("maxpool2d", backend="torch", returns="values", builtin=True, outside_when=every_case)
def torch_max_pool2d(inputs, params):
    """Added: ``F.max_pool2d(x, k, s, p)`` without indices — the built-in's lower
    bound: reads x once, writes the values."""
    import torch.nn.functional as F

    x = inputs["x"]
    k, s, p = window(params)
    return lambda: F.max_pool2d(x, k, s, p)


@strategy("maxpool2d", backend="torch", **INDICES_FIRST_TIE, builtin=True, outside_when=every_case)
def torch_max_pool2d_indices(inputs, params):
    """Added: ``F.max_pool2d(x, k, s, p, return_indices=True)`` — what PyTorch
    users call; one kernel, reads x once, writes values and int64 indices."""
    import torch.nn.functional as F

    x = inputs["x"]
    k, s, p = window(params)
    return lambda: F.max_pool2d(x, k, s, p, return_indices=True)


def torch_reshape_argmax_fn(x, k: int):
    """Windows as rows by reshape/permute (one copy), one argmax, one gather."""
    import torch

    N, C, H, W = x.shape
    h, w = H // k, W // k
    windows = (x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k)
               .permute(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, k * k))
    in_window = windows.argmax(dim=-1, keepdim=True)
    values = windows.gather(-1, in_window).squeeze(-1)
    in_window = in_window.squeeze(-1)
    rows = torch.arange(h, device=x.device).view(h, 1) * k + torch.div(in_window, k, rounding_mode="floor")
    cols = torch.arange(w, device=x.device).view(1, w) * k + in_window % k
    return values, rows * W + cols


@strategy("maxpool2d", backend="torch", **INDICES_FIRST_TIE)
def torch_reshape_argmax(inputs, params):
    """Added: a torch port of the reshape-argmax idea in one stage — the
    windows copied into rows, ``argmax``, ``gather`` and index arithmetic;
    ~6 kernels, the k²-wide copy and int64 temporaries dominate."""
    x, k = inputs["x"], params["k"]
    return lambda: torch_reshape_argmax_fn(x, k)


@strategy("maxpool2d", backend="torch", source="added: torch.compile of torch_reshape_argmax",
          **INDICES_FIRST_TIE, quick_check=True)
def torch_compile_reshape_argmax(inputs, params):
    """``torch.compile`` of the torch reshape-argmax: Inductor fuses the window
    copy, argmax, gather and index arithmetic into one or two kernels. Compile
    time is recorded as setup, outside the timed region."""
    return compiled(torch_reshape_argmax_fn, inputs["x"], params["k"])


@strategy("maxpool2d", backend="numba", **INDICES_FIRST_TIE, backward=numba_scatter_backward,
          outside_when=every_case)
def numba_fused(inputs, params):
    """Added: one parallel numba kernel compiled for this window. For k×k
    windows at stride k: per chunk of bands sized to stay in L1, a vectorised
    vertical max (with its flat index) into a per-thread scratch, then one
    flat horizontal pick per window with row-major tie-breaking. For any other
    stride and padding (``kernels_numba.maxpool2d_window_kernel``): the same
    two passes per output row, over the window's real rows and columns only.
    A channels-last x (N, H, W, C in memory) is pooled where it lies, by a
    kernel vectorised across the channels (``kernels_numba.maxpool2d_nhwc_kernel``),
    its outputs channels-last too. Reads x once, writes values and indices
    once. Another strided x is first copied to C order, inside the timed call."""
    import numba

    from impls import kernels_numba

    x = inputs["x"]
    k, s, p = window(params)
    N, C, H, W = x.shape
    h, w = _pooled_plane(H, W, k, s, p)
    # Plane-relative indices fit int32 for any plane under 2**31 elements: half the scratch.
    index_dtype = np.int32 if H * W < 2**31 else np.int64
    threads = numba.config.NUMBA_NUM_THREADS
    if channels_last(x):
        kernel = kernels_numba.maxpool2d_nhwc_kernel(k, s, p)

        def run():
            values = np.empty((N, h, w, C), dtype=x.dtype)
            indices = np.empty((N, h, w, C), dtype=np.int64)
            kernel(x.transpose(0, 2, 3, 1), h, w, values, indices)
            return values.transpose(0, 3, 1, 2), indices.transpose(0, 3, 1, 2)

        run()  # JIT compile for this signature outside the timed region
        return run
    if s != k or p:
        kernel = kernels_numba.maxpool2d_window_kernel(k, s, p)
        row_length = -(-W // 16) * 16 + 16  # a cache line of padding between threads' rows
        scratch_values = np.empty((threads, row_length), dtype=x.dtype)
        scratch_indices = np.empty((threads, row_length), dtype=index_dtype)

        def run():
            values = np.empty((N, C, h, w), dtype=x.dtype)
            indices = np.empty((N, C, h, w), dtype=np.int64)
            kernel(np.ascontiguousarray(x).reshape(N * C, H, W), H, W, h, w, values.reshape(N * C, h, w),
                   indices.reshape(N * C, h, w), scratch_values, scratch_indices)
            return values, indices

        run()  # JIT compile for this signature outside the timed region
        return run

    kernel = kernels_numba.maxpool2d_kernel(k)
    scratch = kernels_numba.maxpool2d_scratch(x.dtype, index_dtype, W, k, threads)

    def run():
        values = np.empty((N, C, h, w), dtype=x.dtype)
        indices = np.empty((N, C, h, w), dtype=np.int64)
        kernel(np.ascontiguousarray(x).reshape(-1), H, W, values.reshape(-1), indices.reshape(-1), *scratch)
        return values, indices

    run()  # JIT compile for this signature outside the timed region
    return run


@strategy("maxpool2d", backend="triton", **INDICES_FIRST_TIE, backward=triton_gather_backward,
          outside_when=every_case)
def triton_fused(inputs, params):
    """Added: one Triton kernel, one output element per lane, k² strided loads
    (neighbouring lanes share cache lines), first-maximum and NaN rules as
    selects; padding masked, never loaded; reads x once, writes values and
    int64 indices once."""
    from impls import kernels_triton

    x = inputs["x"]
    k, s, p = window(params)
    # Compiled and autotuned for these sizes here, outside the timed calls.
    return kernels_triton.prepared(lambda: kernels_triton.maxpool2d(x, k, s, p))


def order_key(x):
    """JAX: an integer of ``x``'s own bits that orders as its value does, for
    comparisons that keep subnormals. JAX's CPU backend flushes subnormals to
    zero in float arithmetic and comparisons (by design, jax-ml/jax#16200):
    ``jax.jit(jnp.max)`` of [1e-323, 3e-323, 2e-323, 5e-324] is 0.0, and the
    argmax 0. Integer comparisons do not flush, and a max-pool only compares.
    -0.0 and +0.0 get one key (they tie, docs/SPEC.md §1.1); NaN the largest (it wins,
    as in numpy's argmax); one bitcast and a few integer operations per element,
    fused with the comparison."""
    import jax.numpy as jnp
    from jax import lax

    itype = {2: jnp.int16, 4: jnp.int32, 8: jnp.int64}[x.dtype.itemsize]
    bits = lax.bitcast_convert_type(x, itype)
    largest = jnp.iinfo(itype).max
    magnitude = bits & largest
    return jnp.where(jnp.isnan(x), largest, jnp.where(bits < 0, -magnitude, magnitude))


def jax_reshape_argmax_fn(x, k: int):
    """Windows as rows by reshape/transpose, one argmax, one gather (JAX)."""
    import jax.numpy as jnp

    N, C, H, W = x.shape
    h, w = H // k, W // k
    windows = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, k * k)
    # The first maximum, or the first NaN, as numpy's; on the bits' order key,
    # since a float argmax on JAX's CPU backend flushes subnormals.
    in_window = jnp.argmax(order_key(windows), axis=-1)
    values = jnp.take_along_axis(windows, in_window[..., None], axis=-1)[..., 0]
    rows = jnp.arange(h)[:, None] * k + in_window // k
    cols = jnp.arange(w)[None, :] * k + in_window % k
    return values, (rows * W + cols).astype(jnp.int64)


@strategy("maxpool2d", backend="jax", **INDICES_FIRST_TIE)
def jax_reshape_argmax(inputs, params):
    """Added: the reshape-argmax of the seed's answer in JAX, jitted: XLA
    fuses the window copy, argmax, gather and index arithmetic (one or two
    loops over x); values and int64 indices written once. The argmax compares
    integer keys of the values' bits (``order_key``): JAX's CPU backend
    flushes subnormals in float comparisons. Compiled per shape in prepare."""
    from impls.backends import jax_compiled

    return jax_compiled(jax_reshape_argmax_fn, inputs["x"], params["k"], static_argnums=1)


def _first_maximum(a, b):
    """docs/SPEC.md's maximum of two: ``b`` only when strictly greater, or the
    first NaN; a ±0.0 tie keeps the first zero's sign. Compared by
    ``order_key``, not as floats, which JAX's CPU backend flushes when
    subnormal."""
    from jax import lax

    return lax.select(order_key(b) > order_key(a), b, a)


def jax_reduce_window_fn(x, kernel: tuple[int, int, int]):
    """The padding is -inf, the reduction's start: never greater than a real element, so never the maximum."""
    import jax.numpy as jnp
    from jax import lax

    k, s, p = kernel
    return lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), _first_maximum, (1, 1, k, k), (1, 1, s, s),
                             ((0, 0), (0, 0), (p, p), (p, p)))


@strategy("maxpool2d", backend="jax", returns="values",
          no_backward="lax.reduce_window with a reducer of its own (the first-maximum select) has no "
                      "differentiation rule in JAX: jax.vjp fails to linearize it", builtin=True,
          outside_when=every_case)
def jax_reduce_window(inputs, params):
    """Added: ``lax.reduce_window`` over k×k windows at stride s, padded by p, jitted —
    XLA's pooling primitive, values only: reads x once, writes the values.
    The reducer is the contract's first maximum, not ``lax.max``: measured
    here, ``lax.max`` returns +0.0 for a ±0.0 tie whichever comes first
    (IEEE maximum), where the first maximum's bits are asked for; XLA's CPU
    loop visits a window in row-major order (the adversarial check holds it
    to that, bit for bit). It compares integer keys of the values' bits
    (``order_key``), since float comparisons on JAX's CPU backend flush
    subnormals. Compiled per shape in prepare."""
    from impls.backends import jax_compiled

    return jax_compiled(jax_reduce_window_fn, inputs["x"], window(params), static_argnums=1)
