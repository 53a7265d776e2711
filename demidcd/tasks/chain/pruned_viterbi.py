"""Exact Viterbi steps that avoid the full K² scan over predecessors when K is large.

At position t the forward max for tag b is max_a (δ_{t−1}(a) + T[a, b]). With
tmax[b] = max_a T[a, b] (:func:`column_max`, once per w), the predecessors a are visited in
decreasing δ_{t−1}(a) and b's search stops once δ_{t−1}(a) + tmax[b] cannot beat the best
found (CarpeDiem-style upper-bound pruning, Esposito and Radicioni, JMLR 2009): the same table,
value for value, as the dense scan. Used by the chain kernels of :mod:`.kernels` and
:mod:`.decoding`.
"""

from __future__ import annotations

import numba as nb

# Tag counts from which Viterbi prunes the max over predecessors (:func:`relax_pruned`); below,
# the dense ``_relax`` scan (vectorised, K² adds) is as fast or faster. Loss-augmented
# inference prunes from more tags: its +1 on every wrong tag lifts the runners-up to the gold
# tag, so the top predecessors tie and pruning goes deeper (benchmarks/README.md, "Many
# labels").
PRUNE_FROM_LABELS = 64
PRUNE_FROM_LABELS_AUGMENTED = 256


@nb.njit(cache=True, nogil=True)
def column_max(tr, K, out):
    """out[b] = max_a tr[a·K + b], the bound on any transition into b (K ≥ 1)."""
    for b in range(K):
        out[b] = tr[b]
    for a in range(1, K):
        r = tr[a * K:(a + 1) * K]
        for b in range(K):
            v = r[b]
            o = out[b]
            out[b] = v if v > o else o


@nb.njit(cache=True, nogil=True)
def _sift_down_max(hv, hi, i, m):
    """Restore the max-heap order of hv[:m] (with the tags hi alongside) below entry i."""
    while True:
        c = 2 * i + 1
        if c >= m:
            return
        if c + 1 < m and hv[c + 1] > hv[c]:
            c += 1
        if not hv[c] > hv[i]:
            return
        hv[i], hv[c] = hv[c], hv[i]
        hi[i], hi[c] = hi[c], hi[i]
        i = c


@nb.njit(cache=True, nogil=True, inline="always")
def _max_row(pa, row, src, dst, K):
    """dst[b] = max(src[b], pa + row[b]) into the other buffer: in place, LLVM makes the
    select a masked store, microcoded on AMD Zen (see the dense ``_relax``)."""
    for b in range(K):
        v = pa + row[b]
        o = src[b]
        dst[b] = v if v > o else o


@nb.njit(cache=True, nogil=True)
def relax_pruned(prow, crow, K, tr, tmax, hv, hi, sv, si, acc):
    """crow[b] += max_a (prow[a] + tr[a·K + b]) for K ≥ 1, the same values as the dense ``_relax``,
    without scanning every predecessor a (upper-bound pruning, as CarpeDiem; Esposito and
    Radicioni, JMLR 2009).

    With tmax[b] = max_a tr[a·K + b] (``column_max``), predecessors are applied in
    decreasing prow[a], and column b needs no more once the next one, p, has p + tmax[b] ≤ the
    best sum found: every later a' has prow[a'] + tr[a'·K + b] ≤ prow[a'] + tmax[b] ≤
    p + tmax[b] (rounding is monotone), so the max, hence the forward table, is exactly the
    dense scan's, and the backtrack (which rescans every a) breaks ties the same way.

    Order is needed only near the top: with a* the best predecessor, the threshold θ =
    min_b (prow[a*] + tr[a*·K + b] − tmax[b]) (≤ prow[a*]) keeps the candidates prow[a] ≥ θ in
    a max-heap (hv, hi), popped into (sv, si) only as deep as needed. Whole rows are applied
    first (the best sums so far in acc, 2K: two buffers, vectorised like the dense ``_relax``) while
    more than K/16 columns still need the next candidate; the few left continue one by one. A
    column that exhausts the candidates stops if θ + tmax[b] ≤ its best (every other a has
    prow[a] < θ), else scans the others, so θ, rounded or not, only steers the cost. Where
    the top is a cluster (loss-augmented inference: the +1 on every wrong tag lifts the
    runners-up to the gold tag), at most max(8, K/8) candidates are popped: past that, rows
    finish with the dense scan and columns with a scan of every a (max is idempotent), so the
    worst case stays near K². Cheap when emissions dominate transitions (POS tags decoded:
    about 1.05 predecessors per label). hv, sv: K of prow's dtype; hi, si: K int32.
    """
    top = 0
    m1 = prow[0]
    for a in range(1, K):
        if prow[a] > m1:
            m1 = prow[a]
            top = a
    r1 = tr[top * K:(top + 1) * K]
    cur = acc[0:K]
    nxt = acc[K:2 * K]
    theta = m1
    for b in range(K):
        v = m1 + r1[b]
        cur[b] = v
        d = v - tmax[b]  # NaN (−∞ − −∞) compares false: ignored
        theta = d if d < theta else theta
    c = 0
    for a in range(K):
        if prow[a] >= theta:
            hv[c] = prow[a]
            hi[c] = a
            c += 1
    for i in range(c // 2 - 1, -1, -1):
        _sift_down_max(hv, hi, i, c)
    m = c  # heap size
    ns = 0  # candidates popped into (sv, si); all of them applied to every column so far
    cap = max(8, K >> 3)
    while True:
        cut = hv[0] if m > 0 else theta  # bounds every predecessor not applied yet
        active = 0
        for b in range(K):
            active += 1 if cut + tmax[b] > cur[b] else 0
        if active == 0:
            break
        if m > 0 and active > K >> 4:
            if ns >= cap:  # a deep cluster: the dense scan, on top of the rows applied
                for a in range(K):
                    _max_row(prow[a], tr[a * K:(a + 1) * K], cur, nxt, K)
                    cur, nxt = nxt, cur
                break
            pa = hv[0]
            a = hi[0]
            sv[ns] = pa
            si[ns] = a
            ns += 1
            m -= 1
            hv[0] = hv[m]
            hi[0] = hi[m]
            _sift_down_max(hv, hi, 0, m)
            _max_row(pa, tr[a * K:(a + 1) * K], cur, nxt, K)
            cur, nxt = nxt, cur
            continue
        r = ns
        for b in range(K):
            bound = tmax[b]
            best = cur[b]
            if not cut + bound > best:
                continue
            j = r
            stopped = False
            while True:
                if j == ns:
                    if m == 0 or ns >= cap:
                        break
                    sv[ns] = hv[0]
                    si[ns] = hi[0]
                    ns += 1
                    m -= 1
                    hv[0] = hv[m]
                    hi[0] = hi[m]
                    _sift_down_max(hv, hi, 0, m)
                pa = sv[j]
                if not pa + bound > best:
                    stopped = True
                    break
                v = pa + tr[si[j] * K + b]
                if v > best:
                    best = v
                j += 1
            if not stopped and (m > 0 or (c < K and theta + bound > best)):
                for a in range(K):  # every a (m > 0: popping stopped at cap), else the others
                    pa = prow[a]
                    if m > 0 or pa < theta:
                        v = pa + tr[a * K + b]
                        if v > best:
                            best = v
            cur[b] = best
        break
    for b in range(K):
        crow[b] += cur[b]
