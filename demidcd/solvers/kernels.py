"""The one dual coordinate descent update (Eq. 7–8) and shrink (Eq. 9), as numba kernels, and
its L1-loss counterpart, the SMO procedure of the sequential dual method (:func:`smo_examples`).

Every DCD-family learner (1-DCD, DCD-Light, DEMI-DCD's learner, MS-DCD's master) calls these
kernels on the flat arrays of :class:`demidcd.solvers.activeset.ActiveSets` (which picks the
update by the loss), and so does ``sdm-hinge``; nothing here knows which task produced the
structures. The notation below is the L2 loss's; see :func:`smo_examples` for the L1 loss.

Notation (DEMI-DCD paper): for example i and structure y with record (Δ, φ), the dual gradient is

    g_{i,y} = ∇_{i,y} D(α) = w·φ − Δ + A_i / (2C),      A_i = Σ_{y'∈A_i} α_{i,y'}

the closed-form step is d = max(−α, −g / (‖φ‖² + 1/(2C)))  (Eq. 7), then w += d φ (Eq. 8),
and a variable with α = 0 and −g < δ is removed from the active set (Eq. 9; the paper prints
½ΣA where the derivation of Eq. 6 gives ΣA/(2C), which is what we use). Its projected
gradient is g if α > 0 else min(g, 0); max |PG| over the active set measures optimality of the
restricted problem (Eq. 10).

Per-structure storage (structure id s): ``s_hash[s]``, ``s_ptr[s]``/``s_len[s]`` into the φ pool,
and ``s_f[s] = (α, Δ, ‖φ‖²)``. The pool is one int32 array ``p_idx`` (``p_val`` is its float64
view, the same memory); its two encodings (*packed*, ``s_len ≥ 0``, about 2.4 bytes a ±1
entry of a chain; *valued*, ``s_len < 0``, 12 bytes an entry) and the operations that read
and write them (:func:`phi_dot`, :func:`phi_axpy`, :func:`phi_entry`, :func:`store_phi`,
bitwise the same updates in both) are :mod:`demidcd.solvers.phi_pool`'s.

Per example i: ``slots[i, :count[i]]`` holds its
structure ids, oldest first; ``alpha_sum[i] = A_i``. ``meta`` holds the pool counters
(see :data:`META_FIELDS`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .phi_pool import (  # noqa: F401 - the pool's encoding, re-exported for the kernels' users
    ATOMIC_MODE,
    CODED_MAX_DIM,
    PLAIN_MODE,
    atomic_add,
    atomic_axpy,
    axpy,
    begin_store,
    decode_phi,
    entry_cursor,
    entry_keys,
    phi_axpy,
    phi_dot,
    phi_dot_phi,
    phi_entry,
    phi_words,
    put_entry,
    shared_axpy,
    sparse_dot,
    store_phi,
    values_at,
    words_bound,
)

ALPHA, DELTA, SQNORM = 0, 1, 2
# meta[k]: 0 next unused structure id, 1 φ-pool words used, 2 φ-pool words garbage,
# 3 free structure ids on the stack
# touched lines: with tracking on, insert_records stores mark[j >> LINE_SHIFT] = 1 for every entry
# j of an admitted φ (a line is 8 entries, one cache line). w = Σ α φ changes only on entries of
# stored φ, so a publish that copies every marked line reproduces w exactly (see
# demidcd.primitives.seqlock), and the update kernel, the hot loop, stores nothing but w (marking
# each changed line there is costly: benchmarks/README.md, "Marks at admission")
M_NEXT, M_PUSED, M_PGARB, M_NFREE = 0, 1, 2, 3
META_FIELDS = 4
# stats[k] returned by the update kernel
S_UPDATES, S_SHRUNK, S_MAXPG, S_NONZERO_STEPS, S_SKIPPED = 0, 1, 2, 3, 4
STATS_FIELDS = 5
# insert results
I_ADMITTED, I_DUPLICATE, I_REJECTED, I_EVICTED, I_NEXT, I_NEED = 0, 1, 2, 3, 4, 5
INSERT_FIELDS = 6
MERGED_HASH = -0x4D45524745444D45  # s_hash of an aggregated structure: no record matches it
RESWEEP_RATIO = 0.3  # a visit stops re-sweeping an example once its max |PG| fell below this
# share of the first sweep's (EWT XPOS frozen active sets: see benchmarks/README.md)


@njit(cache=True, nogil=True)
def _remove_slot(slots, count, i, k):
    """Drop slot k of example i, keeping the remaining slots in order."""
    c = count[i]
    for q in range(k, c - 1):
        slots[i, q] = slots[i, q + 1]
    slots[i, c - 1] = -1
    count[i] = c - 1


@njit(cache=True, nogil=True)
def _free_structure(s, s_ptr, s_len, p_idx, free_ids, meta):
    meta[M_PGARB] += phi_words(p_idx, s_ptr[s], s_len[s])
    free_ids[meta[M_NFREE]] = s
    meta[M_NFREE] += 1


@njit(cache=True, nogil=True)
def _sweep_example(i, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val, free_ids,
                   meta, inv2c, delta, shrink, stats, hot):
    """One Eq. (7)–(8) step on every structure of example i, newest first, removing those that
    satisfy Eq. (9) when ``shrink``; returns the largest |projected gradient| seen. ``hot``:
    the update mode of w += d φ (:func:`shared_axpy`; empty for one learner)."""
    ex_max = 0.0
    k = count[i] - 1
    while k >= 0:
        s = slots[i, k]
        a = s_f[s, ALPHA]
        st, ln = s_ptr[s], s_len[s]
        g = phi_dot(w, p_idx, p_val, st, ln) - s_f[s, DELTA] + alpha_sum[i] * inv2c
        pg = abs(g) if a > 0.0 else max(-g, 0.0)
        if pg > ex_max:
            ex_max = pg
        if shrink and a == 0.0 and -g < delta:
            _remove_slot(slots, count, i, k)
            _free_structure(s, s_ptr, s_len, p_idx, free_ids, meta)
            stats[S_SHRUNK] += 1
        else:
            d = -g / (s_f[s, SQNORM] + inv2c)
            if d < -a:
                d = -a
            if d != 0.0:
                phi_axpy(w, d, p_idx, p_val, st, ln, hot)
                s_f[s, ALPHA] = a + d
                alpha_sum[i] += d
                stats[S_NONZERO_STEPS] += 1
            stats[S_UPDATES] += 1
        k -= 1
    return ex_max


@njit(cache=True, nogil=True)
def update_examples(order, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val,
                    free_ids, meta, C, delta, shrink, ex_pg, skip_below, max_sweeps, stats,
                    hot):
    """UPDATEWEIGHT (DCD-SSVM Algorithm 1 / DEMI-DCD Algorithm 1 lines 4–10) for each example
    in ``order``: Eq. (7)–(8) steps on every structure of its active set, newest first,
    removing structures that satisfy Eq. (9) when ``shrink``.

    A visit sweeps the example's structures up to ``max_sweeps`` times, stopping once a sweep's
    largest |projected gradient| falls below :data:`RESWEEP_RATIO` of the first sweep's: the
    structures of one example share A_i and their φ and weights are still in cache, so a repeat
    costs a fraction of the first sweep and solves the example's block of the dual more exactly.
    ``ex_pg[i]`` is the largest |PG| of the first sweep at example i's last visit (+inf once a
    structure is admitted); examples with ``ex_pg[i] < skip_below`` are skipped (−1: visit all;
    see :class:`demidcd.solvers.activeset.SweepPlan`).
    Accumulates into ``stats``: updates, shrunk structures, max |projected gradient| (first
    sweeps), non-zero steps, skipped examples. Each step costs O(nnz(φ)); nothing is allocated.
    """
    inv2c = 1.0 / (2.0 * C)
    for t in range(order.shape[0]):
        i = order[t]
        if ex_pg[i] < skip_below:
            stats[S_SKIPPED] += 1
            continue
        first = _sweep_example(i, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val,
                               free_ids, meta, inv2c, delta, shrink, stats, hot)
        ex_pg[i] = first
        if first > stats[S_MAXPG]:
            stats[S_MAXPG] = first
        for _ in range(1, max_sweeps):
            if _sweep_example(i, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val,
                              free_ids, meta, inv2c, delta, shrink,
                              stats, hot) < RESWEEP_RATIO * first:
                break


# ------------------------------------------------------------------ the L1 loss: SMO
SMO_MAX_STEPS = 100  # the SDM learners' SMO pair steps per example visit, at most (the DCD
# learners' L1 visits take ``sweeps`` · |A_i|: see ActiveSets.update)


@njit(cache=True, nogil=True)
def dot_sorted(idx, val, a0, a1, b0, b1):
    """φ_a·φ_b of two sparse vectors with sorted indices."""
    s = 0.0
    i, j = a0, b0
    while i < a1 and j < b1:
        if idx[i] == idx[j]:
            s += val[i] * val[j]
            i += 1
            j += 1
        elif idx[i] < idx[j]:
            i += 1
        else:
            j += 1
    return s


@njit(cache=True, nogil=True)
def smo_examples(examples, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val,
                 free_ids, meta, C, tau, max_steps, per_structure, shrink, ex_pg, skip_below, xi,
                 stats, hot):
    """The SMO procedure of the sequential dual method (SDM paper, Eq. 4.5–4.9) for the L1-loss
    (hinge) SSVM, on the active set of each example in ``examples``: the L1 loss's
    counterpart of :func:`update_examples`, over the same arrays.

    The dual of ½‖w‖² + C Σ_i max(0, max_y Δ − w·φ) has λ_{i,y} ≥ 0 with Σ_y λ_{i,y} ≤ C; the
    gold structure (φ = 0, Δ = 0) holds λ0 = C − A_i (A_i = ``alpha_sum[i]``; α here is λ).
    With g_y = w·φ − Δ, y' = argmin g over the active set and the gold structure (g = 0), and
    y'' = argmax g over those with λ > 0 (the gold structure when λ0 > 0), while the example's
    KKT gap g'' − g' exceeds ``tau`` (at most ``max_steps`` times, or ``max_steps`` · |A_i| times
    with ``per_structure``: as many steps per sweep as the visit's start has structures) the
    pair step
    δ = min(λ'', (g'' − g')/‖φ' − φ''‖²) moves mass from y'' to y' (the whole λ'' when the
    curvature is 0). Then, with ``shrink``, structures whose λ is 0 leave the active set.

    ``ex_pg[i]``: the KKT gap at the visit's start (the L1 counterpart of the largest |PG|;
    examples with ``ex_pg[i] < skip_below`` are skipped, see
    :class:`~demidcd.solvers.activeset.SweepPlan`); ``xi[i]``: the example's hinge loss on its
    active set at the visit's end, ξ̂_i = −g' = max(0, max_y Δ − w·φ) (before the shrink).
    ``stats`` as :func:`update_examples`' (updates and non-zero steps count pair steps, the
    largest |PG| is the largest gap at a visit's start). ``hot``: the update mode of w
    (:func:`shared_axpy`; empty for one learner).
    """
    for e in range(examples.shape[0]):
        i = examples[e]
        if ex_pg[i] < skip_below:
            stats[S_SKIPPED] += 1
            continue
        gmin = 0.0
        steps = max_steps * max(count[i], 1) if per_structure else max_steps
        for it in range(steps + 1):
            lam0 = C - alpha_sum[i]  # the gold structure's λ (its g is 0)
            gmin, kmin = 0.0, -1
            gmax, kmax = -np.inf, -2
            if lam0 > 1e-12 * C:
                gmax, kmax = 0.0, -1
            for q in range(count[i]):
                s = slots[i, q]
                gq = phi_dot(w, p_idx, p_val, s_ptr[s], s_len[s]) - s_f[s, DELTA]
                if gq < gmin:
                    gmin, kmin = gq, q
                if s_f[s, ALPHA] > 0.0 and gq > gmax:
                    gmax, kmax = gq, q
            if it == 0:
                first = max(gmax - gmin, 0.0)
                ex_pg[i] = first
                if first > stats[S_MAXPG]:
                    stats[S_MAXPG] = first
            if kmax == -2 or gmax - gmin <= tau or it == steps:
                break
            if kmin == -1:
                den = s_f[slots[i, kmax], SQNORM]
            elif kmax == -1:
                den = s_f[slots[i, kmin], SQNORM]
            else:
                a, b = slots[i, kmin], slots[i, kmax]
                den = (s_f[a, SQNORM] + s_f[b, SQNORM]
                       - 2.0 * phi_dot_phi(p_idx, p_val, s_ptr[a], s_len[a], s_ptr[b],
                                            s_len[b]))
            cap = lam0 if kmax == -1 else s_f[slots[i, kmax], ALPHA]
            full = True
            d = cap
            if den > 0.0 and (gmax - gmin) / den < cap:  # else the dual falls all the way
                d = (gmax - gmin) / den
                full = False
            if kmin >= 0:
                s = slots[i, kmin]
                s_f[s, ALPHA] += d
                alpha_sum[i] += d
                phi_axpy(w, d, p_idx, p_val, s_ptr[s], s_len[s], hot)
            if kmax >= 0:
                s = slots[i, kmax]
                s_f[s, ALPHA] = 0.0 if full else s_f[s, ALPHA] - d
                alpha_sum[i] -= d
                phi_axpy(w, -d, p_idx, p_val, s_ptr[s], s_len[s], hot)
            stats[S_UPDATES] += 1
            stats[S_NONZERO_STEPS] += 1
        xi[i] = -gmin
        if shrink:
            q = count[i] - 1
            while q >= 0:  # S_n ← S_n \ {y : λ_{n,y} = 0}
                s = slots[i, q]
                if s_f[s, ALPHA] <= 0.0:
                    _remove_slot(slots, count, i, q)
                    _free_structure(s, s_ptr, s_len, p_idx, free_ids, meta)
                    stats[S_SHRUNK] += 1
                q -= 1
        if count[i] == 0:
            alpha_sum[i] = 0.0  # all mass on the gold structure: drop the rounding residue


@njit(cache=True, nogil=True)
def restricted_slack(examples, w, slots, count, s_ptr, s_len, s_f, p_idx, p_val, xi):
    """ξ̂_i = max(0, max_{y ∈ A_i} Δ − w·φ), the hinge loss of example i on its active set
    under the current w, into ``xi[i]`` for each example in ``examples``. The L1 loss's
    violation of a new structure is Δ − w·φ − ξ̂_i (the L2 loss's A_i/(2C) is ξ̂_i at the
    optimum of the restricted problem), so a certified stop is an ε-KKT point of the whole
    dual, as for the L2 loss."""
    for e in range(examples.shape[0]):
        i = examples[e]
        best = 0.0
        for q in range(count[i]):
            s = slots[i, q]
            h = s_f[s, DELTA] - phi_dot(w, p_idx, p_val, s_ptr[s], s_len[s])
            if h > best:
                best = h
        xi[i] = best


@njit(cache=True, nogil=True)
def _aggregate(a, b, s_ptr, s_len, s_f, s_hash, p_idx, p_val, meta):
    """Fold structure a into b: α_b ← α_a + α_b, (Δ_b, φ_b) ← the α-weighted mean of the two
    (φ merged in index order at the end of the pool, in b's encoding; both are sorted by
    index). a's storage is left for the caller to free; w, A_i and Σ α Δ are unchanged. Needs
    ``words_bound(|s_len[a]| + |s_len[b]|)`` free words."""
    aa, ab = s_f[a, ALPHA], s_f[b, ALPHA]
    tot = aa + ab
    ca, cb = aa / tot, ab / tot
    a0, la, na = s_ptr[a], s_len[a], abs(s_len[a])
    b0, lb, nb = s_ptr[b], s_len[b], abs(s_len[b])
    m = nv = h = 0  # the merged length, values and keys first: the values follow the keys
    p0 = meta[M_PUSED]
    ln = 0
    out = (0, 0, 0)
    sq = 0.0
    for rnd in range(2):
        if rnd == 1:
            ln = m if lb >= 0 else -m
            out = begin_store(p_idx, p0, ln, nv, h)
        i, j, q = 0, 0, 0
        last = 0
        xa, xb = entry_cursor(p_idx, a0, la), entry_cursor(p_idx, b0, lb)
        ia, va, ib, vb = -1, 0.0, -1, 0.0
        if na:
            ia, va, xa = phi_entry(p_idx, p_val, a0, la, 0, xa)
        if nb:
            ib, vb, xb = phi_entry(p_idx, p_val, b0, lb, 0, xb)
        sq = 0.0
        while i < na or j < nb:
            take_a = j >= nb or (i < na and ia <= ib)
            take_b = i >= na or (j < nb and ib <= ia)
            idx, v = (ia, 0.0) if take_a else (ib, 0.0)
            if take_a:
                v += ca * va
                i += 1
                if i < na:
                    ia, va, xa = phi_entry(p_idx, p_val, a0, la, i, xa)
            if take_b:
                v += cb * vb
                j += 1
                if j < nb:
                    ib, vb, xb = phi_entry(p_idx, p_val, b0, lb, j, xb)
            if rnd == 1:
                out = put_entry(p_idx, p_val, p0, ln, q, out, idx, v)
                sq += v * v
            else:
                if v != 1.0 and v != -1.0:
                    nv += 1
                h += entry_keys(idx, last)
                last = idx
            q += 1
        m = q
    meta[M_PGARB] += phi_words(p_idx, b0, lb)
    meta[M_PUSED] = p0 + phi_words(p_idx, p0, ln)
    s_ptr[b] = p0
    s_len[b] = ln
    s_f[b, DELTA] = ca * s_f[a, DELTA] + cb * s_f[b, DELTA]
    s_f[b, ALPHA] = tot
    s_f[b, SQNORM] = sq
    s_hash[b] = MERGED_HASH


@njit(cache=True, nogil=True)
def insert_records(r_ex, r_hash, r_delta, r_ptr, r_idx, r_val, start, w, slots, count,
                   alpha_sum, s_hash, s_ptr, s_len, s_f, p_idx, p_val, free_ids, meta, tail,
                   tail_scale, admit, mark, track, ex_pg, out, hot, coded):
    """Add records start.. of a batch to the active sets (de-duplicated by hash).

    A record is admitted when its violation Δ − w·φ − ``tail[i]·tail_scale``, recomputed with
    the current w, exceeds ``admit`` (Eq. 11): for the L2 loss the tail is A_i and the scale
    1/(2C) (the violation is −g); for the L1 loss the tail is the example's hinge loss ξ̂_i on
    its active set (:func:`restricted_slack`) and the scale 1. When example i's active set is
    full, a slot is freed without changing the dual: a structure with α = 0 is dropped, or else
    the two with the smallest α (a, b; cap ≥ 2) are aggregated into one column with α = α_a + α_b
    and (Δ, φ) = (α_a(Δ_a, φ_a) + α_b(Δ_b, φ_b)) / α, which leaves w = Σ α φ, A_i and Σ α Δ,
    hence D(α), unchanged (for either loss). (Evicting a structure with α > 0, as before, moved
    w away from the optimum and let two structures of one example evict each other for ever:
    CoNLL04, 200 sentences, cap 50, tol 1e-3.) Every later admission then raises the dual, so
    the cutting-plane argument for termination holds under the cap.
    Stops early when the structure-id or φ pool is full; ``out[I_NEXT]`` is then the first record
    not processed, ``out[I_NEED]`` the pool words it needs, and the caller grows the pools and
    calls again. An example that receives a
    violating record (admitted, or a duplicate: its structure is violated again) gets
    ``ex_pg[i] = +inf`` so that the next pass visits it. When ``track``, the lines of an admitted
    φ are marked in ``mark`` (the touched lines, see above).
    ``out`` accumulates admitted, duplicates, rejected, evicted (dropped or aggregated).
    ``hot``: the update mode (:func:`shared_axpy`) with which, at a cap of 1 (nothing to
    aggregate with), the evicted α·φ leaves w. ``coded``: store φ coded (w has at most
    :data:`CODED_MAX_DIM` entries), else valued (module docstring).
    """
    cap_s = s_f.shape[0]
    cap_p = p_idx.shape[0]
    max_per = slots.shape[1]
    n = r_ex.shape[0]
    out[I_NEXT] = n
    for r in range(start, n):
        i = r_ex[r]
        h = r_hash[r]
        dup = False
        for k in range(count[i]):
            if s_hash[slots[i, k]] == h:
                dup = True
                break
        if dup:
            out[I_DUPLICATE] += 1
            ex_pg[i] = np.inf
            continue
        rs, re = r_ptr[r], r_ptr[r + 1]
        viol = r_delta[r] - sparse_dot(w, r_idx, r_val, rs, re) - tail[i] * tail_scale
        if viol <= admit:
            out[I_REJECTED] += 1
            continue
        nnz = re - rs
        need = words_bound(nnz)
        kmin = -1
        if count[i] == max_per == 1:
            kmin, k2 = 0, 0
        elif count[i] == max_per:  # the two smallest α: drop the first if 0, else aggregate
            kmin, k2 = 0, 1
            if s_f[slots[i, 1], ALPHA] < s_f[slots[i, 0], ALPHA]:
                kmin, k2 = 1, 0
            for k in range(2, count[i]):
                a = s_f[slots[i, k], ALPHA]
                if a < s_f[slots[i, kmin], ALPHA]:
                    kmin, k2 = k, kmin
                elif a < s_f[slots[i, k2], ALPHA]:
                    k2 = k
            if s_f[slots[i, kmin], ALPHA] > 0.0 and k2 != kmin:
                need += words_bound(abs(s_len[slots[i, kmin]]) + abs(s_len[slots[i, k2]]))
        if (meta[M_NFREE] == 0 and meta[M_NEXT] >= cap_s) or meta[M_PUSED] + need > cap_p:
            out[I_NEXT] = r
            out[I_NEED] = need
            return
        if kmin >= 0:
            s = slots[i, kmin]
            a = s_f[s, ALPHA]
            if a > 0.0 and k2 != kmin:
                _aggregate(s, slots[i, k2], s_ptr, s_len, s_f, s_hash, p_idx, p_val, meta)
            elif a > 0.0:  # a cap of 1 has nothing to aggregate with: α·φ leaves w
                phi_axpy(w, -a, p_idx, p_val, s_ptr[s], s_len[s], hot)
                alpha_sum[i] -= a
            _remove_slot(slots, count, i, kmin)
            _free_structure(s, s_ptr, s_len, p_idx, free_ids, meta)
            out[I_EVICTED] += 1
        if meta[M_NFREE] > 0:
            meta[M_NFREE] -= 1
            s = free_ids[meta[M_NFREE]]
        else:
            s = meta[M_NEXT]
            meta[M_NEXT] += 1
        p0 = meta[M_PUSED]
        ln, sq, words = store_phi(r_idx, r_val, rs, re, p_idx, p_val, p0, coded, mark,
                                   track)
        meta[M_PUSED] = p0 + words
        s_hash[s] = h
        s_ptr[s] = p0
        s_len[s] = ln
        s_f[s, ALPHA] = 0.0
        s_f[s, DELTA] = r_delta[r]
        s_f[s, SQNORM] = sq
        slots[i, count[i]] = s
        count[i] += 1
        ex_pg[i] = np.inf
        out[I_ADMITTED] += 1


@njit(cache=True, nogil=True)
def compact_pool(slots, count, s_ptr, s_len, p_idx, p_val, new_idx, new_val, meta):
    """Move the φ of every live structure to the front of the pool ``new_idx`` (``new_val``
    its float64 view; the words are copied as they are, values included), dropping the garbage
    of freed ones, in the order they are stored, so ``new_*`` may be the current pool itself
    (in-place compaction: every block moves down or stays; offsets stay even)."""
    n_live = 0
    for i in range(slots.shape[0]):
        n_live += count[i]
    live = np.empty(n_live, np.int64)
    q = 0
    for i in range(slots.shape[0]):
        for k in range(count[i]):
            live[q] = slots[i, k]
            q += 1
    live = live[np.argsort(s_ptr[live])]
    pos = 0
    for q in range(n_live):
        s = live[q]
        st, ln = s_ptr[s], phi_words(p_idx, s_ptr[s], s_len[s])
        for r in range(ln):
            new_idx[pos + r] = p_idx[st + r]
        s_ptr[s] = pos
        pos += ln
    meta[M_PUSED] = pos
    meta[M_PGARB] = 0


@njit(cache=True, nogil=True)
def dual_terms(slots, count, alpha_sum, s_f):
    """(Σ_i A_i², Σ_{i,y} Δ_{i,y} α_{i,y}) for the dual objective Eq. (2)."""
    sq = 0.0
    lin = 0.0
    for i in range(slots.shape[0]):
        sq += alpha_sum[i] * alpha_sum[i]
        for k in range(count[i]):
            s = slots[i, k]
            lin += s_f[s, DELTA] * s_f[s, ALPHA]
    return sq, lin


@njit(cache=True, nogil=True)
def rebuild_w(w, slots, count, s_ptr, s_len, s_f, p_idx, p_val):
    """w = Σ α φ (Eq. 3) from scratch, for checks."""
    w[:] = 0.0
    for i in range(slots.shape[0]):
        for k in range(count[i]):
            s = slots[i, k]
            phi_axpy(w, s_f[s, ALPHA], p_idx, p_val, s_ptr[s], s_len[s], PLAIN_MODE)


@njit(cache=True, nogil=True)
def add_alpha_phi(w, slots, count, s_ptr, s_len, s_f, p_idx, p_val, atomic):
    """w += Σ α φ over every stored structure (Eq. 3), with atomic adds when ``atomic``: each
    learner of :mod:`demidcd.solvers.multi_dcd` adds its own examples' share into one zeroed
    shared w, concurrently."""
    hot = ATOMIC_MODE if atomic else PLAIN_MODE
    for i in range(slots.shape[0]):
        for k in range(count[i]):
            s = slots[i, k]
            a = s_f[s, ALPHA]
            if a != 0.0:
                phi_axpy(w, a, p_idx, p_val, s_ptr[s], s_len[s], hot)


@njit(cache=True, nogil=True)
def max_projected_gradient(order, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val,
                           C):
    """max |PG| (Eq. 10) over the active sets of the examples in ``order``, changing nothing:
    the read-only half of the stop rule, for a w rebuilt from α."""
    inv2c = 1.0 / (2.0 * C)
    out = 0.0
    for t in range(order.shape[0]):
        i = order[t]
        for k in range(count[i]):
            s = slots[i, k]
            st, ln = s_ptr[s], s_len[s]
            g = phi_dot(w, p_idx, p_val, st, ln) - s_f[s, DELTA] + alpha_sum[i] * inv2c
            pg = abs(g) if s_f[s, ALPHA] > 0.0 else max(-g, 0.0)
            if pg > out:
                out = pg
    return out


@njit(cache=True, nogil=True)
def dump_structures(examples, slots, count, s_hash, s_ptr, s_len, s_f, p_idx, p_val):
    """The structures of the examples in ``examples`` (in that order, each example's oldest
    first) as flat arrays: (example, hash, Δ, α, φ ptr, φ indices, φ values), φ in CSR form.
    The inverse of :func:`load_structures`; the saved dual state of a run
    (:class:`~demidcd.solvers.state.DualState`)."""
    n_s = 0
    nnz = 0
    for e in range(examples.shape[0]):
        i = examples[e]
        n_s += count[i]
        for q in range(count[i]):
            nnz += abs(s_len[slots[i, q]])
    ex = np.empty(n_s, np.int64)
    hs = np.empty(n_s, np.int64)
    dl = np.empty(n_s)
    al = np.empty(n_s)
    ptr = np.zeros(n_s + 1, np.int64)
    idx = np.empty(nnz, p_idx.dtype)
    val = np.empty(nnz)
    r = 0
    pos = 0
    for e in range(examples.shape[0]):
        i = examples[e]
        for q in range(count[i]):
            s = slots[i, q]
            ex[r] = i
            hs[r] = s_hash[s]
            dl[r] = s_f[s, DELTA]
            al[r] = s_f[s, ALPHA]
            st, ln = s_ptr[s], s_len[s]
            c = entry_cursor(p_idx, st, ln)
            for k in range(abs(ln)):
                idx[pos + k], val[pos + k], c = phi_entry(p_idx, p_val, st, ln, k, c)
            pos += abs(ln)
            r += 1
            ptr[r] = pos
    return ex, hs, dl, al, ptr, idx, val


@njit(cache=True, nogil=True)
def load_structures(keep, r_ex, r_hash, r_delta, r_alpha, r_ptr, r_idx, r_val, slots, count,
                    s_hash, s_ptr, s_len, s_f, p_idx, p_val, meta, mark, track, coded):
    """Append the saved structures whose example is kept (``keep[i]``) to the active sets, in
    their order, with their α, and mark the lines of their φ when ``track``; w and the
    per-example sums are the caller's. The pools and ``slots`` must be large enough (no
    eviction, no growth here: :meth:`~demidcd.solvers.activeset.ActiveSets.restore` sizes
    them; ``coded``: w has at most :data:`CODED_MAX_DIM` entries). Returns the number of
    structures loaded."""
    loaded = 0
    for r in range(r_ex.shape[0]):
        i = r_ex[r]
        if not keep[i]:
            continue
        s = meta[M_NEXT]  # new ids in order (freed ids stay on their stack)
        meta[M_NEXT] += 1
        rs, re = r_ptr[r], r_ptr[r + 1]
        p0 = meta[M_PUSED]
        ln, sq, words = store_phi(r_idx, r_val, rs, re, p_idx, p_val, p0, coded, mark,
                                   track)
        meta[M_PUSED] = p0 + words
        s_hash[s] = r_hash[r]
        s_ptr[s] = p0
        s_len[s] = ln
        s_f[s, ALPHA] = r_alpha[r]
        s_f[s, DELTA] = r_delta[r]
        s_f[s, SQNORM] = sq
        slots[i, count[i]] = s
        count[i] += 1
        loaded += 1
    return loaded


@njit(cache=True, nogil=True)
def add_structures(w, ids, s_ptr, s_len, s_f, p_idx, p_val):
    """w += Σ α φ over the structures ``ids`` (a restored state's, :func:`load_structures`)."""
    for r in range(ids.shape[0]):
        s = ids[r]
        a = s_f[s, ALPHA]
        if a != 0.0:
            phi_axpy(w, a, p_idx, p_val, s_ptr[s], s_len[s], PLAIN_MODE)


@njit(cache=True, nogil=True)
def dump_words(examples, slots, count, s_hash, s_ptr, s_len, s_f, p_idx):
    """The structures of the examples in ``examples`` (each example's oldest first) as they
    lie in the pool: (example, hash, s_f rows (α, Δ, ‖φ‖²), s_len, word ptr, words), the words
    copied as they are (about 2.4 bytes a ±1 entry where :func:`dump_structures` decodes 12).
    The inverse of :func:`load_words`."""
    n_s = 0
    nw = 0
    for e in range(examples.shape[0]):
        i = examples[e]
        n_s += count[i]
        for q in range(count[i]):
            s = slots[i, q]
            nw += phi_words(p_idx, s_ptr[s], s_len[s])
    ex = np.empty(n_s, np.int64)
    hs = np.empty(n_s, np.int64)
    f = np.empty((n_s, 3))
    ln = np.empty(n_s, np.int32)
    ptr = np.zeros(n_s + 1, np.int64)
    words = np.empty(nw, p_idx.dtype)
    r = 0
    pos = 0
    for e in range(examples.shape[0]):
        i = examples[e]
        for q in range(count[i]):
            s = slots[i, q]
            ex[r] = i
            hs[r] = s_hash[s]
            f[r, 0], f[r, 1], f[r, 2] = s_f[s, 0], s_f[s, 1], s_f[s, 2]
            ln[r] = s_len[s]
            st = s_ptr[s]
            k = phi_words(p_idx, st, s_len[s])
            for t in range(k):
                words[pos + t] = p_idx[st + t]
            pos += k
            r += 1
            ptr[r] = pos
    return ex, hs, f, ln, ptr, words


@njit(cache=True, nogil=True)
def load_words(keep, r_ex, r_hash, r_f, r_len, r_ptr, r_words, slots, count, s_hash, s_ptr,
               s_len, s_f, p_idx, meta):
    """Append the structures of a :func:`dump_words` whose example is kept to the active sets,
    their words copied into the pool as they are (the pool and ``slots`` large enough: the
    caller sizes them; w and the per-example sums are the caller's). Returns the number
    loaded."""
    loaded = 0
    for r in range(r_ex.shape[0]):
        i = r_ex[r]
        if not keep[i]:
            continue
        s = meta[M_NEXT]
        meta[M_NEXT] += 1
        p0 = meta[M_PUSED]
        for t in range(r_ptr[r], r_ptr[r + 1]):
            p_idx[p0 + t - r_ptr[r]] = r_words[t]
        meta[M_PUSED] = p0 + r_ptr[r + 1] - r_ptr[r]
        s_hash[s] = r_hash[r]
        s_ptr[s] = p0
        s_len[s] = r_len[r]
        s_f[s, 0], s_f[s, 1], s_f[s, 2] = r_f[r, 0], r_f[r, 1], r_f[r, 2]
        slots[i, count[i]] = s
        count[i] += 1
        loaded += 1
    return loaded
