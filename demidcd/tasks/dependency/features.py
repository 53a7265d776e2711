"""Feature templates of the dependency parser and the scoring of arcs (numba).

The score of a labelled arc h → d with label l is

    s(h, d, l) = Σ_{f ∈ F(x, h, d)} w[f] + Σ_{k ∈ G(x, h, d)} w[base(k) + l],

F the unlabelled arc features below and G a smaller set of templates conjoined with the label:
the weights of (k, l) for l = 0..L−1 sit at L consecutive slots base(k) + l of the same hashed
w (base a multiple of 8 in [0, D − L]), so one template costs L/8 cache lines per arc.

G: dependent side dw, dp, dw·dp, dp−1·dp, dp·dp+1 (+ dc, dw·dc with a second POS column),
cached per word; head side hw·dir, hp·dir (+ hc·dir), cached per word and direction; pair
dd, hp·dp·dd (+ hc·dc·dd), per arc (dir = h < d, dd = direction and distance bucket).

Arc features F(x, h, d) (McDonald et al. 2005, Table 1), with hw/dw the lower-cased head /
dependent word, hp/dp their POS, hw5/dw5 5-character prefixes, hp±1 / dp±1 the POS left and
right of head / dependent (``<s>``/``</s>`` outside the sentence), bp the POS of a word between:

    unigram   hw·hp, hw, hp, dw·dp, dw, dp
    bigram    hw·hp·dw·dp, hp·dw·dp, hw·dw·dp, hw·hp·dp, hw·hp·dw, hw·dw, hp·dp
    prefix    the unigram and bigram templates with hw5/dw5 for hw/dw (only when the head or
              the dependent word is longer than 5 characters)
    surround  hp·hp+1·dp-1·dp, hp-1·hp·dp-1·dp, hp·hp+1·dp·dp+1, hp-1·hp·dp·dp+1, and the
              eight three-POS back-offs dropping hp-1, hp+1, dp-1 or dp+1 (MSTParser's)
    between   hp·bp·dp for every distinct bp strictly between h and d
    second    with a second POS column c (UPOS next to XPOS): hc, dc, hc·dc, hc·dw·dc,
    POS       hw·hc·dc, hw·hc·dw·dc, the four surrounding four-grams and the between-POS
              template over c
    bias      (empty)

each emitted twice, alone and conjoined with the direction (h < d or h > d) and the distance
bucket of |h − d| (1, 2, 3, 4, 5, 6–10, > 10). The back-offs and the second POS column each
raised dev UAS on EWT (benchmarks/README.md, "Evidence behind the defaults and design
choices").

A feature is a 64-bit hash of its template id and attribute hashes (:mod:`.encoding`) mapped
into 0..D−1 (D = ``hashing``, the length of w, a multiple of 16): no dictionary. A template's
plain and direction/distance versions share a 16-weight block (see :func:`_emit`). Features
are computed on the fly for each candidate arc: pre-computing them for the n² arcs of every
sentence would take about 80 ids × 5.3 M arcs × 4 bytes ≈ 1.7 GB on EWT train, against O(1)
extra memory here; arc scoring then dominates inference time.

Loss per word (:func:`arc_loss`): 1 for a wrong head, LABEL_LOSS = 0.5 for the right head with
a wrong label; it factors over labelled arcs, so the loss-augmented arc scores add it before
the max over labels (:func:`score_arcs`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .decoding import NEG, masked

TEMPLATE_VERSION = 1  # unlabelled models (F only)
LABELLED_TEMPLATE_VERSION = 2  # F and the label templates G
LABEL_LOSS = 0.5  # Δ of a word with the right head and a wrong label

_U = np.uint64
_M1 = _U(0x9E3779B97F4A7C15)
_M2 = _U(0xFF51AFD7ED558CCD)
_M3 = _U(0xC4CEB9FE1A85EC53)
_S29 = _U(29)
_S33 = _U(33)
_S32 = _U(32)


@nb.njit(cache=True, nogil=True, inline="always")
def _comb(h, v):
    h = (h ^ v) * _M2
    return h ^ (h >> _S29)


@nb.njit(cache=True, nogil=True, inline="always")
def _emit(key, dd, D, out, c):
    """The feature ``key`` alone and conjoined with direction/distance ``dd`` (1..14), both in
    the 16-weight block the key hashes to, at slots o and (o + dd) mod 16 for a hashed offset o:
    one or two cache lines per template instead of two random ones (fewer cache misses per
    template), and slots still uniformly loaded."""
    h = key ^ (key >> _S33)
    h *= _M3
    h ^= h >> _S29
    base = np.int64(((h >> _S32) * _U(D >> 4)) >> _S32) << 4
    o = np.int64(h & _U(15))
    out[c] = base + o
    out[c + 1] = base + ((o + dd) & 15)
    return c + 2


@nb.njit(cache=True, nogil=True, inline="always")
def _t(k):
    return _U(k) * _M1


@nb.njit(cache=True, nogil=True, inline="always")
def _dir_dist(h, d):
    """Direction and distance bucket of arc h → d: 1..7 (|h − d| = 1, 2, 3, 4, 5, 6–10, > 10),
    plus 7 when h < d."""
    dist = h - d if h > d else d - h
    b = dist if dist <= 5 else (6 if dist <= 10 else 7)
    return b + (7 if h < d else 0)


@nb.njit(cache=True, nogil=True, inline="always")
def _neighbours(tags, a, h, d, N):
    """The tags left and right of head h and of dependent d, (hl, hr, dl, dr), with the
    sentence-boundary symbols ``<s>`` = 1 and ``</s>`` = 2 outside the sentence."""
    hl = tags[a + h - 1] if h > 0 else _U(1)
    hr = tags[a + h + 1] if h + 1 < N else _U(2)
    dl = tags[a + d - 1] if d > 0 else _U(1)
    dr = tags[a + d + 1] if d + 1 < N else _U(2)
    return hl, hr, dl, dr


@nb.njit(cache=True, nogil=True, inline="always")
def _surround(t, hp, dp, hl, hr, dl, dr, dd, D, out, c):
    """The four surrounding four-grams hp·hp+1·dp-1·dp, hp-1·hp·dp-1·dp, hp·hp+1·dp·dp+1 and
    hp-1·hp·dp·dp+1 as templates t..t+3 (of either POS column); returns the new c."""
    c = _emit(_comb(_comb(_comb(_comb(_t(t), hp), hr), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(t + 1), hl), hp), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(t + 2), hp), hr), dp), dr), dd, D, out, c)
    return _emit(_comb(_comb(_comb(_comb(_t(t + 3), hl), hp), dp), dr), dd, D, out, c)


@nb.njit(cache=True, nogil=True, inline="always")
def _between(t, h, d, a, hp, dp, tags, tagk, dd, D, stamp, mark, out, c):
    """Template t, hp·bp·dp, for every distinct tag bp strictly between h and d (of either POS
    column): ``stamp`` over the small tag ids ``tagk`` and the unique ``mark`` skip repeats;
    returns the new c."""
    lo = h if h < d else d
    hi = d if h < d else h
    if hi - lo > 1:
        base = _comb(_t(t), hp)
        for q in range(a + lo + 1, a + hi):
            k = tagk[q]
            if stamp[k] != mark:
                stamp[k] = mark
                c = _emit(_comb(_comb(base, tags[q]), dp), dd, D, out, c)
    return c


@nb.njit(cache=True, nogil=True)
def arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, out):
    """Feature ids of arc h → d (positions within the sentence starting at ``a``, N = n + 1)
    into ``out``; returns their number. ``stamp`` (int64[n_pos]) and the unique ``mark`` dedupe
    the between-POS features."""
    dd = _dir_dist(h, d)
    hw = word[a + h]
    hp = pos[a + h]
    dw = word[a + d]
    dp = pos[a + d]
    c = 0
    # unigram and bigram
    c = _emit(_comb(_comb(_t(1), hw), hp), dd, D, out, c)
    c = _emit(_comb(_t(2), hw), dd, D, out, c)
    c = _emit(_comb(_t(3), hp), dd, D, out, c)
    c = _emit(_comb(_comb(_t(4), dw), dp), dd, D, out, c)
    c = _emit(_comb(_t(5), dw), dd, D, out, c)
    c = _emit(_comb(_t(6), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(7), hw), hp), dw), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(8), hp), dw), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(9), hw), dw), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(10), hw), hp), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(11), hw), hp), dw), dd, D, out, c)
    c = _emit(_comb(_comb(_t(12), hw), dw), dd, D, out, c)
    c = _emit(_comb(_comb(_t(13), hp), dp), dd, D, out, c)
    # 5-prefix versions
    h5 = pre[a + h]
    d5 = pre[a + d]
    if h5 != hw or d5 != dw:
        c = _emit(_comb(_comb(_t(14), h5), hp), dd, D, out, c)
        c = _emit(_comb(_t(15), h5), dd, D, out, c)
        c = _emit(_comb(_comb(_t(16), d5), dp), dd, D, out, c)
        c = _emit(_comb(_t(17), d5), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(18), h5), hp), d5), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(19), hp), d5), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(20), h5), d5), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(21), h5), hp), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(22), h5), hp), d5), dd, D, out, c)
        c = _emit(_comb(_comb(_t(23), h5), d5), dd, D, out, c)
    # surrounding POS
    hl, hr, dl, dr = _neighbours(pos, a, h, d, N)
    c = _surround(24, hp, dp, hl, hr, dl, dr, dd, D, out, c)
    # the four-grams with one of the outer POS dropped (MSTParser's back-offs)
    c = _emit(_comb(_comb(_comb(_t(30), hp), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(31), hp), hr), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(32), hl), hp), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(33), hp), dp), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(34), hl), hr), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(35), hp), hr), dl), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(36), hl), hr), dp), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(37), hl), hp), dl), dr), dd, D, out, c)
    # coarse POS versions (when the corpus has a second POS column)
    if cpos.shape[0] > 0:
        hc = cpos[a + h]
        dc = cpos[a + d]
        c = _emit(_comb(_t(40), hc), dd, D, out, c)
        c = _emit(_comb(_t(41), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_t(42), hc), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(43), hc), dw), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(44), hw), hc), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(45), hw), hc), dw), dc), dd, D, out, c)
        hl, hr, dl, dr = _neighbours(cpos, a, h, d, N)
        c = _surround(46, hc, dc, hl, hr, dl, dr, dd, D, out, c)
        c = _between(50, h, d, a, hc, dc, cpos, cposk, dd, D, stamp, mark, out, c)
    # bias
    c = _emit(_t(29), dd, D, out, c)
    # between POS (distinct)
    return _between(28, h, d, a, hp, dp, pos, posk, dd, D, stamp, mark, out, c)


@nb.njit(cache=True, nogil=True)
def max_features(N):
    """Upper bound on the features of one arc in a sentence of N positions."""
    return 2 * 52 + 4 * max(N, 1)


@nb.njit(cache=True, nogil=True, inline="always")
def arc_score(w, h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf):
    """Σ_{f ∈ F(h, d)} w[f], the label-free part of s(h, d, l) (``fbuf``: scratch of
    :func:`max_features` ids; ``stamp``, ``mark`` as in :func:`arc_features`)."""
    m = arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
    s = 0.0
    for q in range(m):
        s += w[fbuf[q]]
    return s


# ---------------------------------------------------------------------------------------------
# label-conjoined features (numba): template keys k, the weight of (k, label l) at base(k) + l
# ---------------------------------------------------------------------------------------------
MAX_LABEL_KEYS = 16  # bound on the keys of one arc (dependent + head + pair templates)


@nb.njit(cache=True, nogil=True, inline="always")
def _label_base(key, D, L):
    """First of the L consecutive weights of label-conjoined ``key``: w[base + l] is the weight
    of (key, label l). base is a multiple of 8 (a 64-byte cache line) in [0, D − L], so the
    label loop reads L/8 consecutive lines instead of L random ones."""
    h = key ^ (key >> _S33)
    h *= _M3
    h ^= h >> _S29
    nblk = _U((D - L) // 8 + 1)
    return np.int64(((h >> _S32) * nblk) >> _S32) * 8


@nb.njit(cache=True, nogil=True)
def _dep_label_keys(d, a, N, word, pos, cpos, D, L, out, c):
    """Bases of the dependent-side label templates of word d (dw, dp, dw·dp, dp−1·dp, dp·dp+1;
    with a second POS column dc, dw·dc) into out[c:]; returns the new c."""
    dw = word[a + d]
    dp = pos[a + d]
    dl = pos[a + d - 1]
    dr = pos[a + d + 1] if d + 1 < N else _U(2)
    out[c] = _label_base(_comb(_t(60), dw), D, L)
    out[c + 1] = _label_base(_comb(_t(61), dp), D, L)
    out[c + 2] = _label_base(_comb(_comb(_t(62), dw), dp), D, L)
    out[c + 3] = _label_base(_comb(_comb(_t(63), dl), dp), D, L)
    out[c + 4] = _label_base(_comb(_comb(_t(64), dp), dr), D, L)
    c += 5
    if cpos.shape[0] > 0:
        dc = cpos[a + d]
        out[c] = _label_base(_comb(_t(65), dc), D, L)
        out[c + 1] = _label_base(_comb(_comb(_t(66), dw), dc), D, L)
        c += 2
    return c


@nb.njit(cache=True, nogil=True)
def _head_label_keys(h, right, a, word, pos, cpos, D, L, out, c):
    """Bases of the head-side label templates of head h with its dependent to the ``right``
    (1) or left (0): hw·dir, hp·dir (and hc·dir); returns the new c."""
    r = _U(right + 1)
    out[c] = _label_base(_comb(_comb(_t(70), word[a + h]), r), D, L)
    out[c + 1] = _label_base(_comb(_comb(_t(71), pos[a + h]), r), D, L)
    c += 2
    if cpos.shape[0] > 0:
        out[c] = _label_base(_comb(_comb(_t(72), cpos[a + h]), r), D, L)
        c += 1
    return c


@nb.njit(cache=True, nogil=True)
def _pair_label_keys(h, d, a, pos, cpos, D, L, out, c):
    """Bases of the label templates of the pair h → d: dd (direction·distance), hp·dp·dd (and
    hc·dc·dd); returns the new c. Unlexicalised: a few thousand keys whose blocks stay in
    cache. The lexical pair templates hw·dp·dir, hp·dw·dir, hw·dw slowed loss-augmented
    inference and lowered UAS and LAS in the same training time, and so did richer
    dependent-side templates (benchmarks/README.md, "Evidence behind the defaults and design
    choices")."""
    dd = _U(_dir_dist(h, d))
    out[c] = _label_base(_comb(_t(80), dd), D, L)
    out[c + 1] = _label_base(_comb(_comb(_comb(_t(81), pos[a + h]), pos[a + d]), dd), D, L)
    c += 2
    if cpos.shape[0] > 0:
        out[c] = _label_base(_comb(_comb(_comb(_t(85), cpos[a + h]), cpos[a + d]), dd), D, L)
        c += 1
    return c


@nb.njit(cache=True, nogil=True)
def label_keys(h, d, a, N, word, pos, cpos, D, L, out):
    """All label-template bases of arc h → d (G(h, d) below); returns their number."""
    c = _dep_label_keys(d, a, N, word, pos, cpos, D, L, out, 0)
    c = _head_label_keys(h, 1 if h < d else 0, a, word, pos, cpos, D, L, out, c)
    return _pair_label_keys(h, d, a, pos, cpos, D, L, out, c)


@nb.njit(cache=True, nogil=True, inline="always")
def _add_block(w, base, L, acc):
    for q in range(L):
        acc[q] += w[base + q]


@nb.njit(cache=True, nogil=True, inline="always")
def arc_loss(h, l, g, gl):
    """Δ of one word given head h and label l against gold head g and label gl: 1 for a wrong
    head, LABEL_LOSS for the right head with a wrong label (l = gl = −1 when unlabelled)."""
    if h != g:
        return 1.0
    return LABEL_LOSS if l != gl else 0.0


@nb.njit(cache=True, nogil=True)
def score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf,
               lab_arcs, gold, glab, augment, S, Lab, LD, LH, acc, kbuf, fhead, flab):
    """S[h·N + d] = max_l s(h, d, l) (+ Δ of the arc when ``augment``) for all h ≠ d, d ≥ 1, and
    Lab[h·N + d] = its argmax label (−1 unlabelled); impossible arcs (into ROOT, self) get −1e300.

    Given heads and labels (``predict --force``; ``fhead``/``flab`` per position, −1 free, or
    empty arrays: none): a word d with a given head g has every other arc h → d masked to
    −1e300 (its features are not even computed), and a word with a given label l scores
    s(h, d) = s(h, d, l) instead of the max (the label kept even where training never saw it
    on such an arc).

    s(h, d, l) = Σ_{f∈F(h,d)} w[f] + Σ_{k∈G(h,d)} w[base(k) + l], l ranging over the labels
    allowed on the arc (``lab_arcs[l]`` bit 1: on root arcs h = 0, bit 2: on the others). G
    splits into dependent-side keys (cached per d in LD), head-side keys (per h and direction
    in LH) and pair keys, so the label loop costs L·|pair keys| per arc. Returns the next
    ``mark``."""
    L = lab_arcs.shape[0]
    for h in range(N):
        S[h * N] = NEG
        S[h * N + h] = NEG
        Lab[h * N] = -1
        Lab[h * N + h] = -1
    if L > 0:
        for d in range(1, N):
            row = LD[d * L:(d + 1) * L]
            row[:] = 0.0
            c = _dep_label_keys(d, a, N, word, pos, cpos, D, L, kbuf, 0)
            for q in range(c):
                _add_block(w, kbuf[q], L, row)
        for h in range(N):
            for right in range(2):
                row = LH[(2 * h + right) * L:(2 * h + right + 1) * L]
                row[:] = 0.0
                c = _head_label_keys(h, right, a, word, pos, cpos, D, L, kbuf, 0)
                for q in range(c):
                    _add_block(w, kbuf[q], L, row)
    fixing = fhead.shape[0] > 0
    for h in range(N):
        for d in range(1, N):
            if h == d:
                continue
            if fixing and masked(fhead, a, h, d):
                S[h * N + d] = NEG
                Lab[h * N + d] = -1
                continue
            s = arc_score(w, h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            g = gold[a + d] if augment else -1
            if L == 0:
                S[h * N + d] = s + (arc_loss(h, -1, g, -1) if augment else 0.0)
                Lab[h * N + d] = -1
                continue
            right = 1 if h < d else 0
            for q in range(L):
                acc[q] = LD[d * L + q] + LH[(2 * h + right) * L + q]
            c = _pair_label_keys(h, d, a, pos, cpos, D, L, kbuf, 0)
            for q in range(c):
                _add_block(w, kbuf[q], L, acc)
            need = 1 if h == 0 else 2
            gl = glab[a + d] if augment else -1
            keep = flab[a + d] if fixing else -1
            best = -np.inf
            arg = -1
            for q in range(L) if keep < 0 else range(keep, keep + 1):
                if keep < 0 and lab_arcs[q] & need == 0:
                    continue
                v = acc[q] + (arc_loss(h, q, g, gl) if augment else 0.0)
                if v > best:
                    best = v
                    arg = q
            S[h * N + d] = s + best
            Lab[h * N + d] = arg
    return mark
