"""Which emission layout ``weights="auto"`` takes for a chain model: a weight for every
(feature, label) pair (``"all"``), or only for the pairs seen together in training
(``"seen"``, CRFsuite's layout), chosen by a model of the training run's peak memory.

The model (bytes; ``p`` processes, one learner and p − 1 inference workers):

    peak(layout) = p·R + D + b(p)·dim(layout) + 12·S·[layout = seen]

* R = :data:`RUNTIME_BYTES`: one process's interpreter, numpy, numba and the loaded kernels;
* D = :data:`DATA_FACTOR` × the bytes of the encoded training sentences (feature ids and
  values, shared by the forked workers): what training holds per token besides w (the
  sentences, the φ pool and the active sets, which grow with the data);
* dim(all) = F·K + (K+1)² + G·K², dim(seen) = S rounded up to a multiple of K + (K+1)² + G·K²
  (F observation features, K labels, G label-bigram features, S seen pairs);
* b(p) = :data:`BYTES_PER_WEIGHT` + :data:`BYTES_PER_WEIGHT_WORKER`·(p − 1): the learner's
  float64 w, the double-buffered float32 w̄ in shared memory, the float64 copy the result and
  the model file take at the end, and a float32 copy per worker (its private read of w̄);
* 12·S: the seen layout's pair table (int32 labels, int64 offsets) kept with the model.

``auto`` keeps every pair while the memory it adds over the seen layout,
peak(all) − peak(seen), is at most :data:`ALL_PAIRS_SHARE` of peak(seen) or at most
:data:`ALL_PAIRS_ALLOWANCE`, whichever is larger; otherwise it takes the seen pairs. Where the
dense weights are cheap (EWT's 49 XPOS tags on 204k tokens, Brown's 12 universal tags,
CoNLL-2000's 22 chunk tags) every pair is kept, as the seen pairs cost accuracy there (the
negative weights of unseen pairs; benchmarks/README.md, "seen pairs"); where they would fill
memory (a million tokens with 45 or 83 tags: 18-39 M dense weights against 1-2 M seen, and
two to four times the run's other memory) the seen pairs are taken.

The layout is the problem being solved, so it must not change with ``--threads`` (a p = 1 and
a p = 2 run of the same data are compared on one objective): the model is evaluated at
:data:`REFERENCE_PROCESSES` processes whatever the run's count. The fixed rule this replaces
(seen pairs once F·K > 2^25, 256 MiB of float64) counted one copy of w and nothing else, so
that 83 tags on a corpus just under it peaked at 1 GiB where python-crfsuite's L-BFGS needs
0.7 (issue 56).

Calibration (``benchmarks/memory_labels.py``, a million synthetic tokens, p = 2, 60 s, the
log's peak; modelled in brackets): 12 tags, every pair 414 MiB (392), seen 321 (340); 45 tags
668 (756), seen 359 (368); 83 tags 1,179 (1,218), 361 (385).
"""

from __future__ import annotations

from dataclasses import dataclass

RUNTIME_BYTES = 80 * 2**20
"""One training process's fixed memory (PSS): interpreter, numpy, numba, the kernels."""
DATA_FACTOR = 2.5
"""What training holds per byte of encoded training sentences (the sentences themselves, the
φ pool and active sets over a run of a minute or so)."""
BYTES_PER_WEIGHT = 20
"""Bytes per weight at one process: float64 w + 2 float32 w̄ buffers + the result's float64."""
BYTES_PER_WEIGHT_WORKER = 4
"""Bytes per weight each further process adds (its float32 copy of w̄)."""
PAIR_BYTES = 12
"""Bytes per seen pair of the seen layout's table (int32 label; int64 offsets per feature)."""
ALL_PAIRS_SHARE = 0.25
"""``auto`` keeps every pair while it adds at most this share to the seen layout's modelled
peak ..."""
ALL_PAIRS_ALLOWANCE = 192 * 2**20
"""... or at most this many bytes (EWT XPOS, 49 tags on 204k tokens: 146 MiB modelled)."""
REFERENCE_PROCESSES = 2
"""The process count the choice is modelled at (the layout must not depend on --threads)."""


@dataclass(frozen=True)
class LayoutChoice:
    """The layout ``auto`` chose (``"all"`` or ``"seen"``), the modelled peaks (bytes) of both
    and the line that says why."""

    layout: str
    peak_all: float
    peak_seen: float
    processes: int

    def reason(self) -> str:
        return (f"weights: {'every (feature, tag) pair' if self.layout == 'all' else 'seen pairs'}"
                f" (auto: modelled peak {self.peak_all / 2**20:,.0f} MiB with every pair, "
                f"{self.peak_seen / 2**20:,.0f} MiB with the seen ones, at {self.processes} "
                f"process{'es' if self.processes != 1 else ''})")


def weights_dim(F: int, K: int, G: int, seen: int | None) -> int:
    """Length of w: the emission block (every pair, or ``seen`` pairs rounded up to whole rows
    of K), then the (K+1)² transitions and G·K² label-bigram weights."""
    rows = F if seen is None else -(-seen // max(K, 1))
    return rows * K + (K + 1) ** 2 + G * K * K


def modelled_peak(F: int, K: int, G: int, seen: int | None, data_bytes: int,
                  processes: int) -> float:
    """Modelled peak memory (bytes) of a training run (module docstring); ``seen``: the seen
    layout with that many pairs, None: every pair."""
    p = max(int(processes), 1)
    per_weight = BYTES_PER_WEIGHT + BYTES_PER_WEIGHT_WORKER * (p - 1)
    table = PAIR_BYTES * seen if seen is not None else 0
    return (p * RUNTIME_BYTES + DATA_FACTOR * data_bytes
            + per_weight * weights_dim(F, K, G, seen) + table)


def choose_layout(F: int, K: int, G: int, n_seen: int, data_bytes: int,
                  processes: int = REFERENCE_PROCESSES) -> LayoutChoice:
    """``weights="auto"``'s choice for F observation features, K labels, G label-bigram
    features, ``n_seen`` seen (feature, label) pairs and ``data_bytes`` of encoded training
    sentences, modelled at ``processes`` processes: every pair while the memory it adds to the
    seen layout's peak is at most :data:`ALL_PAIRS_SHARE` of that peak or
    :data:`ALL_PAIRS_ALLOWANCE`, else the seen pairs (module docstring)."""
    dense = modelled_peak(F, K, G, None, data_bytes, processes)
    sparse = modelled_peak(F, K, G, n_seen, data_bytes, processes)
    budget = max(ALL_PAIRS_SHARE * sparse, ALL_PAIRS_ALLOWANCE)
    layout = "all" if dense - sparse <= budget else "seen"
    return LayoutChoice(layout, dense, sparse, max(int(processes), 1))


def encoded_bytes(enc: object) -> int:
    """Bytes of the encoded sentences' arrays (an
    :class:`~demidcd.tasks.chain.features.EncodedSequences`: pointers, ids and values)."""
    return sum(int(getattr(a, "nbytes", 0)) for a in (
        getattr(enc, name, None) for name in ("sent_ptr", "feat_ptr", "feat_idx", "feat_val",
                                              "bfeat_ptr", "bfeat_idx", "bfeat_val")))
