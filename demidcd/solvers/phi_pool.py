"""The φ pool's encoding: how the active sets store a structure's φ in one int32 array, and the
vector operations on it (w·φ, w += dφ, entry by entry), as numba kernels.

The pool is one int32 array ``p_idx`` (``p_val`` is its float64 view, the same memory); a
structure starts on an even word and is stored in one of two encodings, entries in index
order (``s_len[s]`` tells which):

* *packed* (``s_len[s] = nnz ≥ 0``; every w of at most :data:`CODED_MAX_DIM` entries): word
  ``st`` holds m, the number of stored values, word ``st + 1`` h, the number of key bytes;
  the keys follow (padded to an even number of words), then the m float64 values. Entry q's
  index is the previous entry's plus a gap g (the first entry's gap from 0); its key is the
  integer x = 4·g + c in a prefix varint, little-endian: n − 1 one-bits then a zero-bit mark
  an n-byte key (n ≤ 4: x < 2^7 in 1 byte as x·2, x < 2^14 in 2 as x·4 + 1, x < 2^21 in 3 as
  x·8 + 3, x < 2^28 in 4 as x·16 + 7), four one-bits a 5-byte key (x·16 + 15): 1 byte for a
  gap below 2^5, 2 below 2^12, 3 below 2^19, 4 below 2^26, else 5; a decoder reads five
  bytes at once (a structure's words are followed by at least two more: see
  :func:`words_bound`). c = 1 for the value +1, 0 for −1, 2 for any other value, which is the
  next of the m stored values. A chain's φ over binary features is mostly ±1 (a feature or
  transition counted twice in one sentence has another value) and its sorted indices lie
  close (the labels of one feature are neighbours: benchmarks/README.md has the gaps'
  distribution and the bytes an entry, against 16-bit keys, one int32 key an entry and an
  (int32, float64) pair);
* *valued* (``s_len[s] = −nnz``, a larger w): the nnz int32 indices (padded to an even
  count), then the nnz float64 values, 12 bytes an entry.

The kernels read either through :func:`phi_dot`, :func:`phi_axpy` and :func:`phi_entry`, in
the same order and with the same partial sums as :func:`sparse_dot` / :func:`axpy` on the
(index, value) pairs (w_j · ±1 is ±w_j exactly), so every update is bitwise the same in both
encodings; :meth:`~demidcd.solvers.activeset.ActiveSets.phi` decodes one structure.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.extending import intrinsic

from ..primitives.seqlock import LINE_SHIFT

# Index arithmetic in the two kernels below is unsigned on purpose: numba wraps negative
# indices, so every a[k] with a signed k (or a signed feature index) costs a sign test and a
# select; with unsigned loop counters and indices the loop body is one load, one multiply and
# one add (or one read-modify-write). Together with four partial sums (which break the serial
# chain of floating-point adds) this makes the update kernel markedly faster (benchmarks/README.md,
# "Earlier code (772ea80)").
_U1, _U2, _U3, _U4 = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
_LINE = np.uint64(LINE_SHIFT)


@njit(cache=True, nogil=True)
def sparse_dot(w, idx, val, start, end):
    """w·φ for φ = (idx[start:end], val[start:end]) (four partial sums)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    k = np.uint64(start)
    e = np.uint64(end)
    while k + _U4 <= e:
        s0 += w[np.uint64(idx[k])] * val[k]
        s1 += w[np.uint64(idx[k + _U1])] * val[k + _U1]
        s2 += w[np.uint64(idx[k + _U2])] * val[k + _U2]
        s3 += w[np.uint64(idx[k + _U3])] * val[k + _U3]
        k += _U4
    while k < e:
        s0 += w[np.uint64(idx[k])] * val[k]
        k += _U1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True)
def axpy(w, d, idx, val, start, end):
    """w += d φ for φ = (idx[start:end], val[start:end])."""
    for k in range(np.uint64(start), np.uint64(end)):
        w[np.uint64(idx[k])] += d * val[k]


@intrinsic
def atomic_add(typingctx, arr, i, v):
    """``arr[i] += v`` as one LLVM ``atomicrmw fadd`` (monotonic ordering; ``lock cmpxchg``
    loop on x86-64): concurrent adds to one entry from several processes are never lost.
    ``arr`` a C-contiguous float64 array, ``i`` an integer index (no wraparound)."""
    sig = types.void(arr, i, v)

    def codegen(context, builder, signature, args):
        aryty, idxty, valty = signature.args
        ary, idx, val = args
        a = context.make_array(aryty)(context, builder, ary)
        idx = context.cast(builder, idx, idxty, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, a, [idx], wraparound=False)
        val = context.cast(builder, val, valty, types.float64)
        builder.atomic_rmw("fadd", ptr, val, "monotonic")
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def atomic_axpy(w, d, idx, val, start, end):
    """w += d φ with atomic adds (:func:`atomic_add`), for a w shared by several learners."""
    for k in range(np.uint64(start), np.uint64(end)):
        atomic_add(w, np.uint64(idx[k]), d * val[k])


@njit(cache=True, nogil=True)
def shared_axpy(w, d, idx, val, start, end, hot):
    """w += d φ on a w that other learners may write at the same time. ``hot`` selects the
    update mode: empty, plain stores (one learner, or PASSCoDe-Wild: a concurrent add to the
    same entry may be lost); otherwise every add atomic (:func:`atomic_add`)."""
    if hot.shape[0] == 0:
        axpy(w, d, idx, val, start, end)
    else:
        atomic_axpy(w, d, idx, val, start, end)



CODED_MAX_DIM = 1 << 29  # packed gaps (and the valued format's int32 indices) stay below 2^31
PLAIN_MODE = np.zeros(0, np.uint8)  # the update modes of shared_axpy, for the kernels' own
ATOMIC_MODE = np.ones(1, np.uint8)  # calls
_U16 = np.uint64(16)
_CODE = np.uint64(3)


@njit(cache=True, nogil=True)
def _key_words(h):
    """Words taken by h key bytes, rounded up to an even count (the values are float64)."""
    return ((h + 7) >> 3) << 1


@njit(cache=True, nogil=True)
def phi_words(p_idx, st, ln):
    """Pool words (int32) taken by the structure at word ``st`` with ``s_len`` = ``ln``
    (module docstring)."""
    if ln >= 0:
        return 2 + _key_words(p_idx[st + 1]) + 2 * p_idx[st]
    n = -ln
    return n + (n & 1) + 2 * n


@njit(cache=True, nogil=True)
def words_bound(nnz):
    """Pool words a φ of ``nnz`` entries takes at most, in either encoding, with room to spare:
    packed it takes at most 2 header words, 5 key bytes and one value an entry, i.e. at most
    3.25·nnz + 4 words (valued 3·nnz + 1), so a pool that has this room before a store keeps
    at least two words past the structure stored, which :func:`_key`'s five-byte reads
    need."""
    return 4 * nnz + 4


@njit(cache=True, nogil=True)
def values_at(p_idx, st, ln):
    """Index in ``p_val`` of the first value of the structure at (even) word ``st``."""
    if ln >= 0:
        return (st + 2 + _key_words(p_idx[st + 1])) >> 1
    return (st - ln + (-ln & 1)) >> 1


def _key_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """By a key's first byte: its length n in bytes, the marker bits to drop, the payload
    mask (module docstring)."""
    n = np.zeros(256, np.uint64)
    sh = np.zeros(256, np.uint64)
    mask = np.zeros(256, np.uint64)
    for b in range(256):
        t = 0
        while t < 8 and (b >> t) & 1:
            t += 1
        ln = t + 1 if t < 4 else 5
        n[b], sh[b] = ln, min(ln, 4)
        mask[b] = (1 << (8 * ln - min(ln, 4))) - 1
    return n, sh, mask


KEY_LEN, KEY_SHIFT, KEY_MASK = _key_tables()
_U8, _U24, _U32 = np.uint64(8), np.uint64(24), np.uint64(32)


@njit(cache=True, nogil=True)
def _key(h, k, j):
    """Decode the packed entry at key byte ``k`` after index ``j``: (index, code, next key).
    Branch-free: the key's (up to) five bytes are read at once and its first byte's marker
    picks length, shift and mask from tables, so the next index is known without a
    mispredicted branch and the loads of w for several entries overlap (a byte-by-byte
    decode loop was much slower: benchmarks/README.md)."""
    b0 = h[k]
    v = (np.uint64(b0) | (np.uint64(h[k + _U1]) << _U8) | (np.uint64(h[k + _U2]) << _U16)
         | (np.uint64(h[k + _U3]) << _U24) | (np.uint64(h[k + _U4]) << _U32))
    x = (v >> KEY_SHIFT[b0]) & KEY_MASK[b0]
    return j + (x >> _U2), x & _CODE, k + KEY_LEN[b0]


@njit(cache=True, nogil=True)
def _coded(w, h, k, j, vals, c):
    """w_j·v of the packed entry at key ``k`` after index ``j``: (w_j·v, next key, index,
    next value cursor). The sign is a select, not a branch: ±w_j, exactly w_j·(±1)."""
    j, code, k = _key(h, k, j)
    x = w[j]
    if code == _U2:  # rare: a value stored after the keys
        return x * vals[c], k, j, c + _U1
    return (x if code == _U1 else -x), k, j, c


@njit(cache=True, nogil=True)
def phi_dot(w, p_idx, p_val, st, ln):
    """w·φ for the stored structure at word ``st`` with ``s_len`` = ``ln``, in either encoding,
    with the same four partial sums (so the same rounding) as :func:`sparse_dot`."""
    vb = values_at(p_idx, st, ln)
    if ln < 0:
        return sparse_dot(w, p_idx[st:st - ln], p_val[vb:vb - ln], 0, -ln)
    h = p_idx.view(np.uint8)
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    c = np.uint64(vb)
    k = np.uint64(4 * (st + 2))
    j = np.uint64(0)
    q = np.uint64(0)
    e = np.uint64(ln)
    while q + _U4 <= e:
        x, k, j, c = _coded(w, h, k, j, p_val, c)
        s0 += x
        x, k, j, c = _coded(w, h, k, j, p_val, c)
        s1 += x
        x, k, j, c = _coded(w, h, k, j, p_val, c)
        s2 += x
        x, k, j, c = _coded(w, h, k, j, p_val, c)
        s3 += x
        q += _U4
    while q < e:
        x, k, j, c = _coded(w, h, k, j, p_val, c)
        s0 += x
        q += _U1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True)
def phi_axpy(w, d, p_idx, p_val, st, ln, hot):
    """w += d φ for the stored structure at word ``st`` (either encoding), in the update mode
    ``hot`` of :func:`shared_axpy`."""
    vb = values_at(p_idx, st, ln)
    if ln < 0:
        shared_axpy(w, d, p_idx[st:st - ln], p_val[vb:vb - ln], 0, -ln, hot)
        return
    h = p_idx.view(np.uint8)
    atomic = hot.shape[0] > 0
    c = np.uint64(vb)
    k = np.uint64(4 * (st + 2))
    j = np.uint64(0)
    for _ in range(ln):
        j, code, k = _key(h, k, j)
        if code == _U2:
            v = d * p_val[c]
            c += _U1
        else:
            v = d if code == _U1 else -d
        if atomic:
            atomic_add(w, j, v)
        else:
            w[j] += v


@njit(cache=True, nogil=True)
def entry_cursor(p_idx, st, ln):
    """The read cursor of :func:`phi_entry` before entry 0 of the structure at word ``st``:
    (value cursor, key cursor, last index)."""
    return values_at(p_idx, st, ln), 4 * (st + 2), 0


@njit(cache=True, nogil=True)
def phi_entry(p_idx, p_val, st, ln, q, cur):
    """Entry q of the stored structure at word ``st``, read in order from cursor ``cur``
    (:func:`entry_cursor` before entry 0): (index, value, next cursor)."""
    c, k, j = cur
    if ln < 0:
        return np.int64(p_idx[st + q]), p_val[c], (c + 1, k, j)
    jj, code, kk = _key(p_idx.view(np.uint8), np.uint64(k), np.uint64(j))
    j, k = np.int64(jj), np.int64(kk)
    if code == 1:
        return j, 1.0, (c, k, j)
    if code == 0:
        return j, -1.0, (c, k, j)
    return j, p_val[c], (c + 1, k, j)


@njit(cache=True, nogil=True)
def decode_phi(p_idx, p_val, st, ln):
    """φ of the structure at word ``st`` (``ln`` its ``s_len``), in either encoding, as
    (int64 indices in order, float64 values): :func:`phi_entry` entry by entry."""
    n = abs(ln)
    idx = np.empty(n, np.int64)
    val = np.empty(n)
    cur = entry_cursor(p_idx, st, ln)
    for q in range(n):
        idx[q], val[q], cur = phi_entry(p_idx, p_val, st, ln, q, cur)
    return idx, val


@njit(cache=True, nogil=True)
def entry_keys(j, last):
    """Key bytes the packed entry of index ``j`` after index ``last`` takes: 1 for a gap below
    2^5, 2 below 2^12, 3 below 2^19, 4 below 2^26, else 5 (module docstring)."""
    x = 4 * (j - last) + 3
    return 1 if x < (1 << 7) else 2 if x < (1 << 14) else 3 if x < (1 << 21) else \
        4 if x < (1 << 28) else 5


@njit(cache=True, nogil=True)
def begin_store(p_idx, p0, ln, m, h):
    """Start storing a structure of ``s_len`` = ``ln`` at word ``p0`` (packed: with ``m``
    values and ``h`` keys, its header written): the write cursor of :func:`put_entry`."""
    if ln >= 0:
        p_idx[p0] = m
        p_idx[p0 + 1] = h
    return values_at(p_idx, p0, ln), 4 * (p0 + 2), 0


@njit(cache=True, nogil=True)
def put_entry(p_idx, p_val, p0, ln, q, cur, j, v):
    """Write entry q = (j, v) (indices increasing) of the structure being stored at word
    ``p0`` from cursor ``cur`` (:func:`begin_store`); returns the next cursor."""
    c, k, last = cur
    if ln < 0:
        p_idx[p0 + q] = j
        p_val[c] = v
        return c + 1, k, last
    h = p_idx.view(np.uint8)
    code = 1 if v == 1.0 else 0 if v == -1.0 else 2
    x = 4 * (j - last) + code
    if x < (1 << 7):
        n, y = 1, x << 1
    elif x < (1 << 14):
        n, y = 2, (x << 2) | 1
    elif x < (1 << 21):
        n, y = 3, (x << 3) | 3
    elif x < (1 << 28):
        n, y = 4, (x << 4) | 7
    else:
        n, y = 5, (x << 4) | 15
    for b in range(n):
        h[k + b] = (y >> (8 * b)) & 255
    k += n
    if code == 2:
        p_val[c] = v
        c += 1
    return c, k, j


@njit(cache=True, nogil=True)
def phi_dot_phi(p_idx, p_val, a0, la, b0, lb):
    """φ_a·φ_b of two stored structures (indices sorted in both)."""
    s = 0.0
    na, nb = abs(la), abs(lb)
    if na == 0 or nb == 0:
        return 0.0
    ca, cb = entry_cursor(p_idx, a0, la), entry_cursor(p_idx, b0, lb)
    ia, va, ca = phi_entry(p_idx, p_val, a0, la, 0, ca)
    ib, vb, cb = phi_entry(p_idx, p_val, b0, lb, 0, cb)
    i, j = 1, 1
    while True:
        if ia == ib:
            s += va * vb
        if ia <= ib:
            if i == na:
                break
            ia, va, ca = phi_entry(p_idx, p_val, a0, la, i, ca)
            i += 1
        else:
            if j == nb:
                break
            ib, vb, cb = phi_entry(p_idx, p_val, b0, lb, j, cb)
            j += 1
    return s


@njit(cache=True, nogil=True)
def store_phi(r_idx, r_val, rs, re, p_idx, p_val, p0, coded, mark, track):
    """Store record entries rs..re at (even) word ``p0``, packed when ``coded`` (w has at most
    :data:`CODED_MAX_DIM` entries) else valued, marking their lines when ``track``. Returns
    (s_len, ‖φ‖², pool words taken)."""
    nnz = re - rs
    ln = nnz if coded else -nnz
    m = 0
    h = 0
    if coded:  # the header first: the values follow the keys
        last = 0
        for q in range(rs, re):
            v = r_val[q]
            if v != 1.0 and v != -1.0:
                m += 1
            h += entry_keys(r_idx[q], last)
            last = r_idx[q]
    cur = begin_store(p_idx, p0, ln, m, h)
    sq = 0.0
    for q in range(nnz):
        j = r_idx[rs + q]
        if track and mark[np.uint64(j) >> _LINE] == 0:  # no store when set: the
            mark[np.uint64(j) >> _LINE] = 1  # mark is shared by every learner
        v = r_val[rs + q]
        cur = put_entry(p_idx, p_val, p0, ln, q, cur, np.int64(j), v)
        sq += v * v
    return ln, sq, phi_words(p_idx, p0, ln)
