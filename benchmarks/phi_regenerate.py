"""A structure's φ stored (the coded pool) or regenerated from its labels (issue 43): bytes per
structure and the cost of the learner's two reads of it, w·φ and w += d φ, on Brown.

    python benchmarks/phi_regenerate.py [--sentences 20000] [--passes 9]

Structures: on the first ``--sentences`` sentences of Brown train (universal tags, built-in
features, the dense U block), DCD-Light (inference, admission and an update per block of 256,
seed 0) is run for 1/8, 1/4, 1/2 and 1 epoch; the Viterbi taggings of every sentence under each
of those four w that differ from the gold one are the structures (a loss-augmented tagging
differs in more tokens, which scales both costs alike). Each is held two ways:

* *stored*: φ = Φ(x, y) − Φ(x, ŷ) from the task (``phi_delta``), in the learner's coded pool
  (:func:`demidcd.solvers.kernels._store_phi`, 4 bytes a ±1 entry) and read by
  :func:`~demidcd.solvers.kernels.phi_dot` / :func:`~demidcd.solvers.kernels.phi_axpy`;
* *regenerated*: the example id and ŷ (one byte a token; 3 bytes a differing token would do),
  φ recomputed at every read from the sentence's feature rows: for each token where ŷ differs
  the feature row at both labels, and the transitions into, out of and around it.

The timed pass does, per structure, w·φ then w += d φ with a tiny d, as one DCD update (Eq.
7–8) does; both passes read and write the same w, and the regenerated w·φ is checked against the
stored one. Writes ``results/phi_regenerate_brown.json``: bytes per structure both ways, the
fastest and median pass, ns per structure. Run it alone; compare the ratio within one run.
"""

from __future__ import annotations

import argparse
import time

import numba as nb
import numpy as np
from common import RESULTS, machine_info, write_json
from phi_pool import brown_task

from demidcd.solvers import kernels as K
from demidcd.solvers.activeset import ActiveSets


@nb.njit(cache=True, nogil=True)
def store_all(ptr, idx, val, words):
    """The coded pool of every structure (record r: entries ptr[r]..ptr[r+1]): (p_idx, s_ptr,
    s_len)."""
    n = ptr.shape[0] - 1
    p_idx = np.zeros(words + (words & 1), np.int32)
    p_val = p_idx.view(np.float64)
    s_ptr = np.zeros(n, np.int64)
    s_len = np.zeros(n, np.int64)
    mark = np.zeros(1, np.uint8)
    p0 = 0
    for r in range(n):
        s_ptr[r] = p0
        ln, _, used = K.store_phi(idx, val, ptr[r], ptr[r + 1], p_idx, p_val, p0, True, mark,
                                   False)
        s_len[r] = ln
        p0 += used + (used & 1)
    return p_idx[:p0 + 2], s_ptr, s_len


@nb.njit(cache=True, nogil=True)
def stored_pass(w, p_idx, s_ptr, s_len, d):
    p_val = p_idx.view(np.float64)
    none = np.zeros(0, np.uint8)
    total = 0.0
    for r in range(s_ptr.shape[0]):
        total += K.phi_dot(w, p_idx, p_val, s_ptr[r], s_len[r])
        K.phi_axpy(w, d, p_idx, p_val, s_ptr[r], s_len[r], none)
    return total


@nb.njit(cache=True, nogil=True, inline="always")
def _regen(w, F, Kt, sent_ptr, feat_ptr, feat_idx, gold, i, yh, h0, d, write):
    """w·φ (``write`` False) or w += d φ (True) of tagging yh[h0:h0+n] of sentence i, φ made from
    the feature rows (dense U block, binary features) and the transition block."""
    K1 = Kt + 1
    tb = F * Kt
    a = sent_ptr[i]
    n = sent_ptr[i + 1] - a
    s = 0.0
    pg = Kt  # START
    ph = Kt
    for t in range(n):
        g = gold[a + t]
        h = yh[h0 + t]
        if g != h:
            for q in range(feat_ptr[a + t], feat_ptr[a + t + 1]):
                base = np.int64(feat_idx[q]) * Kt
                if write:
                    w[base + g] += d
                    w[base + h] -= d
                else:
                    s += w[base + g] - w[base + h]
        if g != h or pg != ph:
            if write:
                w[tb + pg * K1 + g] += d
                w[tb + ph * K1 + h] -= d
            else:
                s += w[tb + pg * K1 + g] - w[tb + ph * K1 + h]
        pg, ph = g, h
    if pg != ph:  # into END
        if write:
            w[tb + pg * K1 + Kt] += d
            w[tb + ph * K1 + Kt] -= d
        else:
            s += w[tb + pg * K1 + Kt] - w[tb + ph * K1 + Kt]
    return s


@nb.njit(cache=True, nogil=True)
def regen_dots(w, F, Kt, sent_ptr, feat_ptr, feat_idx, gold, ex, yh, yptr):
    out = np.empty(ex.shape[0])
    for r in range(ex.shape[0]):
        out[r] = _regen(w, F, Kt, sent_ptr, feat_ptr, feat_idx, gold, ex[r], yh, yptr[r], 0.0,
                        False)
    return out


@nb.njit(cache=True, nogil=True)
def regen_pass(w, F, Kt, sent_ptr, feat_ptr, feat_idx, gold, ex, yh, yptr, d):
    total = 0.0
    for r in range(ex.shape[0]):
        total += _regen(w, F, Kt, sent_ptr, feat_ptr, feat_idx, gold, ex[r], yh, yptr[r], d,
                        False)
        _regen(w, F, Kt, sent_ptr, feat_ptr, feat_idx, gold, ex[r], yh, yptr[r], d, True)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--passes", type=int, default=9)
    ap.add_argument("--out", default=str(RESULTS / "phi_regenerate_brown.json"))
    a = ap.parse_args()
    task = brown_task(a.sentences)
    assert task.pairs is None and task.G == 0 and task.chain.feat_val.shape[0] == 0
    n = task.n_examples
    gold = np.ascontiguousarray(task.Y, np.int32)
    act = ActiveSets(n, task.dim, 0.1)
    rng = np.random.default_rng(0)
    order = rng.permutation(n).astype(np.int64)
    ex_l, y_l = [], []
    done = 0
    for frac in (0.125, 0.25, 0.5, 1.0):
        while done < int(frac * n):
            chunk = order[done:done + 256]
            act.insert(task.loss_augmented(act.w, chunk), 0.01)
            act.update(chunk)
            done += chunk.shape[0]
        tags, ptr = task.decode_flat(act.w, np.arange(n, dtype=np.int64))
        for i in range(n):
            y = tags[ptr[i]:ptr[i + 1]]
            if (y != gold[task.sent_ptr[i]:task.sent_ptr[i + 1]]).any():
                ex_l.append(i)
                y_l.append(y.astype(np.uint8))
    ex = np.array(ex_l, np.int64)
    yptr = np.concatenate([[0], np.cumsum([y.shape[0] for y in y_l])]).astype(np.int64)
    yh = np.concatenate(y_l)
    phis = [task.phi_delta(int(i), y.astype(np.int32)) for i, y in zip(ex, y_l, strict=True)]
    rptr = np.concatenate([[0], np.cumsum([p[0].shape[0] for p in phis])]).astype(np.int64)
    ridx = np.concatenate([p[0] for p in phis]).astype(np.int32)
    rval = np.concatenate([p[1] for p in phis])
    p_idx, s_ptr, s_len = store_all(rptr, ridx, rval, int(K.words_bound(rptr[-1])) + 2 * len(ex))
    w = act.w.copy()
    X_ = task.chain
    F, Kt = task.u_rows, task.K
    args = (F, Kt, task.sent_ptr, X_.feat_ptr, X_.feat_idx, gold, ex, yh, yptr)
    exact = np.array([float(w[p[0]] @ p[1]) for p in phis])
    got = regen_dots(w, *args)
    assert np.allclose(got, exact, rtol=1e-9, atol=1e-9), "regenerated w·φ differs"
    differing = int(sum((y != gold[task.sent_ptr[i]:task.sent_ptr[i + 1]]).sum()
                        for i, y in zip(ex, y_l, strict=True)))
    times = {"stored": [], "regenerated": []}
    stored_pass(w, p_idx, s_ptr, s_len, 1e-12)
    regen_pass(w, *args, 1e-12)
    for _ in range(a.passes):
        for name in times:
            t = time.perf_counter()
            if name == "stored":
                stored_pass(w, p_idx, s_ptr, s_len, 1e-12)
            else:
                regen_pass(w, *args, 1e-12)
            times[name].append(time.perf_counter() - t)
    m = len(ex)
    res = {"sentences": n, "structures": m, "dim": int(task.dim),
           "entries_per_structure": float(rptr[-1] / m),
           "differing_tokens_per_structure": differing / m,
           "tokens_per_structure": float(yptr[-1] / m),
           "bytes_per_structure": {"stored": float(p_idx.nbytes / m),
                                   "regenerated_labels": float(yptr[-1] / m) + 8,
                                   "regenerated_differences": 3 * differing / m + 8},
           "ns_per_structure_fastest": {k: 1e9 * min(v) / m for k, v in times.items()},
           "ns_per_structure_median": {k: 1e9 * float(np.median(v)) / m
                                       for k, v in times.items()},
           "machine": machine_info()}
    res["regenerated_over_stored_fastest"] = (res["ns_per_structure_fastest"]["regenerated"]
                                              / res["ns_per_structure_fastest"]["stored"])
    print({k: v for k, v in res.items() if k != "machine"})
    write_json(a.out, res)


if __name__ == "__main__":
    main()
