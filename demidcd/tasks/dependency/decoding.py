"""Tree decoders over a flat N×N arc-score matrix S[h·N + d] (N = n + 1 positions, ROOT at 0):
the best tree rooted at 0 with exactly one child of the root (UD's rule), with Eisner's
algorithm (projective trees, O(n³), :func:`eisner_ws`) or Chu-Liu-Edmonds (all trees, O(n³)
here, :func:`cle_ws`). Both write heads[0:N] with heads[0] = −1 and use scratch from
:func:`workspace`, allocated once per batch by the caller.

Given heads (``predict --force``, ``DependencyParser.predict(X, fixed=...)``): a word d with
a given head g keeps it by masking, s(h, d) = NEG = −1e300 for every h ≠ g (:func:`masked`;
the arc scorer does not even compute the masked arcs' features), and a given label l replaces
the max over labels; the decoders are unchanged and return the best tree of unmasked arcs
whenever one exists. Such a tree exists iff at most one word is given head 0 and the given
heads have no cycle (:func:`fixed_heads_check`); a *projective* one may not (given arcs that
cross), and then the Eisner optimum uses a masked arc, which :func:`decode_tree` detects to
decode that sentence with Chu-Liu-Edmonds instead.
"""

from __future__ import annotations

import numba as nb
import numpy as np

EISNER, CLE = 0, 1
"""Decoder codes of the kernels (``DependencyTask(decoder="eisner" | "cle")``)."""
NEG = -1e300
"""Score of an impossible arc: into ROOT, a loop, or masked by a given head."""


@nb.njit(cache=True, nogil=True, inline="always")
def masked(fhead, a, h, d):
    """True when arc h → d is ruled out by a given head of d (``fhead`` per position from
    ``a``, −1 free)."""
    g = fhead[a + d]
    return g >= 0 and g != h


@nb.njit(cache=True, nogil=True)
def workspace(maxN, decoder):
    """Scratch for :func:`eisner_ws` (float64[4N²], int32[3N² + 9N + 9]) or :func:`cle_ws`
    (float64[4N²], int32[4N² + 10N + 1], bool[4N]) on sentences of up to maxN positions."""
    NN = maxN * maxN
    if decoder == EISNER:
        return np.empty(4 * NN), np.empty(3 * NN + 9 * maxN + 9, np.int32), np.empty(0, np.bool_)
    return (np.empty(4 * NN), np.empty(4 * NN + 10 * maxN + 1, np.int32),
            np.empty(4 * maxN, np.bool_))


@nb.njit(cache=True, nogil=True)
def eisner_ws(S, N, heads, wf, wi):
    """Highest-scoring projective tree rooted at 0 with exactly one child of the root
    (Eisner 1996), O(N³); writes heads[0:N] (heads[0] = −1) and returns its score
    Σ_d S[heads[d]·N + d]. ``wf``, ``wi``: scratch from :func:`workspace`.

    Spans [s, t]: complete C[s,t,r] (r = 1: headed at s, r = 0: at t), incomplete I[s,t,r]
    (the arc s → t when r = 1, t → s when r = 0):

        I[s,t,·] = max_{s≤r<t} C[s,r,1] + C[r+1,t,0] + S(s→t or t→s)
        C[s,t,0] = max_{s≤r<t} C[s,r,0] + I[r,t,0],  C[s,t,1] = max_{s<r≤t} I[s,r,1] + C[r,t,1]

    Single root: a root arc 0 → t may only close the split r = 0, I[0,t,1] = C[1,t,0] + S(0,t),
    so C[0,n,1] = max_t S(0,t) + C[1,t,0] + C[t,n,1]: the root's complete span attaches one
    child t, which heads all of 1..n (the inner Eisner over 1..n, then the best root child).
    Ties go to the smallest split point.
    """
    NN = N * N
    C0 = wf[0:NN]
    C1 = wf[NN:2 * NN]
    I0 = wf[2 * NN:3 * NN]
    I1 = wf[3 * NN:4 * NN]
    bI = wi[0:NN]
    bC0 = wi[NN:2 * NN]
    bC1 = wi[2 * NN:3 * NN]
    stack = wi[3 * NN:3 * NN + 3 * (3 * N + 3)]
    for s in range(N):
        C0[s * N + s] = 0.0
        C1[s * N + s] = 0.0
    for k in range(1, N):
        for s in range(0, N - k):
            t = s + k
            best = -np.inf
            arg = s
            for r in range(s, s + 1 if s == 0 else t):
                v = C1[s * N + r] + C0[(r + 1) * N + t]
                if v > best:
                    best = v
                    arg = r
            I0[s * N + t] = best + S[t * N + s]
            I1[s * N + t] = best + S[s * N + t]
            bI[s * N + t] = arg
            best = -np.inf
            arg = s
            for r in range(s, t):
                v = C0[s * N + r] + I0[r * N + t]
                if v > best:
                    best = v
                    arg = r
            C0[s * N + t] = best
            bC0[s * N + t] = arg
            best = -np.inf
            arg = s + 1
            for r in range(s + 1, t + 1):
                v = I1[s * N + r] + C1[r * N + t]
                if v > best:
                    best = v
                    arg = r
            C1[s * N + t] = best
            bC1[s * N + t] = arg
    heads[0] = -1
    # backtrack with an explicit stack of (s, t, kind): kind 0/1 = C0/C1, 2/3 = I0/I1
    stack[0] = 0
    stack[1] = N - 1
    stack[2] = 1
    top = 1
    while top > 0:
        top -= 1
        p = 3 * top
        s = stack[p]
        t = stack[p + 1]
        kind = stack[p + 2]
        if s == t:
            continue
        if kind == 0:
            r = bC0[s * N + t]
            stack[p], stack[p + 1], stack[p + 2] = s, r, 0
            stack[p + 3], stack[p + 4], stack[p + 5] = r, t, 2
        elif kind == 1:
            r = bC1[s * N + t]
            stack[p], stack[p + 1], stack[p + 2] = s, r, 3
            stack[p + 3], stack[p + 4], stack[p + 5] = r, t, 1
        else:
            r = bI[s * N + t]
            if kind == 2:
                heads[s] = t
            else:
                heads[t] = s
            stack[p], stack[p + 1], stack[p + 2] = s, r, 1
            stack[p + 3], stack[p + 4], stack[p + 5] = r + 1, t, 0
        top += 2
    total = 0.0
    for d in range(1, N):
        total += S[heads[d] * N + d]
    return total


@nb.njit(cache=True, nogil=True)
def cle_ws(S, N, heads, wf, wi, wb):
    """Maximum spanning arborescence rooted at 0 with exactly one root arc (Chu & Liu 1965,
    Edmonds 1967, with the root constraint of Gabow & Tarjan 1984), O(N³); writes heads[0:N]
    (heads[0] = −1) and returns its score. ``wf``, ``wi``, ``wb``: scratch from
    :func:`workspace`.

    Root constraint: every root arc is lowered by M = 1 + Σ_d (max_h S(h,d) − min_h S(h,d)),
    more than the score range of all trees; a tree with k root arcs then scores its own
    score − kM, so the unconstrained maximum has k = 1 and is the best single-root tree (the
    score returned is recomputed from S). Zmigrod et al. (2020) give an O(N²) exact variant;
    this one keeps the plain algorithm.

    Plain algorithm: greedy best head per node; while the heads contain a cycle C, contract it
    into a new node c with in-scores s(u, c) = max_{v∈C} s(u, v) − s(head(v), v) and
    out-scores s(c, u) = max_{v∈C} s(v, u), remembering the maximisers; then expand the
    contractions in reverse order (the node of C entered from outside takes that head, the
    rest keep their cycle heads). Nodes are ids 0..2N−1 (new nodes appended).
    """
    M = 2 * N
    W = wf[:M * M]
    W[:] = -np.inf
    penalty = 1.0
    for d in range(1, N):
        lo = np.inf
        hi = -np.inf
        for h in range(N):
            v = S[h * N + d]
            if h != d and v > NEG and v < np.inf:
                lo = min(lo, v)
                hi = max(hi, v)
        if hi > lo:
            penalty += hi - lo
    for h in range(N):
        for d in range(1, N):
            if h != d:
                W[h * M + d] = S[h * N + d] - (penalty if h == 0 else 0.0)
    alive = wb[0:M]
    incyc = wb[M:2 * M]
    alive[:] = False
    alive[:N] = True
    incyc[:] = False
    o = 0
    head = wi[o:o + M]
    o += M
    enter = wi[o:o + N * M]
    o += N * M
    leave = wi[o:o + N * M]
    o += N * M
    cnode = wi[o:o + N]
    o += N
    mem = wi[o:o + M]
    o += M
    mem_ptr = wi[o:o + N + 1]
    o += N + 1
    mhead = wi[o:o + M]
    o += M
    color = wi[o:o + M]
    head[:] = -1
    mem_ptr[0] = 0
    nn = N
    nc = 0
    while True:
        for v in range(1, nn):
            if not alive[v]:
                continue
            best = -np.inf
            arg = -1
            for u in range(nn):
                if alive[u] and u != v and W[u * M + v] > best:
                    best = W[u * M + v]
                    arg = u
            head[v] = arg
        # find a cycle
        color[:nn] = 0
        found = -1
        for v in range(1, nn):
            if not alive[v] or color[v] != 0:
                continue
            x = v
            while x > 0 and color[x] == 0:
                color[x] = v
                x = head[x]
            if x > 0 and color[x] == v:
                found = x
                break
        if found < 0:
            break
        # contract the cycle through ``found`` into node c = nn
        c = nn
        nn += 1
        p = mem_ptr[nc]
        x = found
        while True:
            mem[p] = x
            mhead[p] = head[x]
            incyc[x] = True
            p += 1
            x = head[x]
            if x == found:
                break
        mem_ptr[nc + 1] = p
        for u in range(c):
            if not alive[u] or incyc[u]:
                continue
            bi = -np.inf
            ai = -1
            bo = -np.inf
            ao = -1
            for q in range(mem_ptr[nc], p):
                v = mem[q]
                vi = W[u * M + v] - W[head[v] * M + v]
                if vi > bi:
                    bi = vi
                    ai = v
                vo = W[v * M + u]
                if vo > bo:
                    bo = vo
                    ao = v
            W[u * M + c] = bi
            enter[nc * M + u] = ai
            W[c * M + u] = bo
            leave[nc * M + u] = ao
        for q in range(mem_ptr[nc], p):
            alive[mem[q]] = False
            incyc[mem[q]] = False
        alive[c] = True
        cnode[nc] = c
        nc += 1
    # expand
    for k in range(nc - 1, -1, -1):
        c = cnode[k]
        for q in range(mem_ptr[k], mem_ptr[k + 1]):
            head[mem[q]] = mhead[q]
            incyc[mem[q]] = True
        for u in range(c):
            if head[u] == c and not incyc[u]:
                head[u] = leave[k * M + u]
        h = head[c]
        head[enter[k * M + h]] = h
        for q in range(mem_ptr[k], mem_ptr[k + 1]):
            incyc[mem[q]] = False
    heads[0] = -1
    total = 0.0
    for d in range(1, N):
        heads[d] = head[d]
        total += S[head[d] * N + d]
    return total


@nb.njit(cache=True, nogil=True)
def max_len(tok_ptr, examples):
    """The most positions (words + ROOT) of a sentence among ``examples`` (at least 1)."""
    m = 1
    for e in range(examples.shape[0]):
        i = examples[e]
        n = tok_ptr[i + 1] - tok_ptr[i]
        if n > m:
            m = n
    return m


@nb.njit(cache=True, nogil=True)
def decode_tree(S, N, y, decoder, fhead, a, wf, wi, wb, cf, ci, cb):
    """The best single-root tree over the arc scores S into y with the ``decoder``'s scratch
    wf, wi, wb; with given heads ``fhead`` (from position ``a``; empty: none), already masked
    in S, and Eisner: when the projective optimum drops one of them (no projective tree keeps
    them all), decode again with Chu-Liu-Edmonds in the scratch cf, ci, cb and return 1
    (else 0)."""
    if decoder != EISNER:
        cle_ws(S, N, y, wf, wi, wb)
        return 0
    eisner_ws(S, N, y, wf, wi)
    if fhead.shape[0] == 0:
        return 0
    for d in range(1, N):
        if masked(fhead, a, y[d], d):
            cle_ws(S, N, y, cf, ci, cb)
            return 1
    return 0


@nb.njit(cache=True, nogil=True)
def fixed_heads_check(tok_ptr, fhead, examples):
    """Whether some single-root tree keeps the given heads ``fhead`` (per position, −1 free) of
    each example: (code, word) per example, code 0 yes, 1 two words given head 0 (word: the
    second), 2 the given heads form a cycle (word: one on it). Otherwise a tree exists: the
    given arcs form a forest; hang every other forest root below the word given head 0, or
    below any forest root when none is. (A *projective* one may still not exist: see
    :func:`decode_tree`.)"""
    n_ex = examples.shape[0]
    code = np.zeros(n_ex, np.int64)
    where = np.zeros(n_ex, np.int64)
    state = np.zeros(max_len(tok_ptr, examples), np.int64)
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        root = 0
        for d in range(1, N):
            if fhead[a + d] == 0:
                if root:
                    code[e] = 1
                    where[e] = d
                    break
                root = d
        if code[e]:
            continue
        # state: 0 unseen, d on the path walked from d, −1 reaches the root or a free word
        state[:N] = 0
        for d in range(1, N):
            x = d
            while x > 0 and state[x] == 0 and fhead[a + x] >= 0:
                state[x] = d
                x = fhead[a + x]
            if x > 0 and state[x] == d:
                code[e] = 2
                where[e] = x
                break
            x = d
            while x > 0 and state[x] == d:
                state[x] = -1
                x = fhead[a + x]
    return code, where
