"""Inner products for the solvers' loops, serial and without the GIL.

numpy's ``a @ b`` on two vectors calls BLAS (OpenBLAS's ``ddot`` in numpy's wheels), which
splits vectors longer than 10,000 entries over all the machine's cores; its threads then spin
(busy-wait) for the next call instead of sleeping. Between the calls of a training loop they take
the cores from the solver's own threads: on Spanish NER (95,653 weights) one CRF objective
evaluation on 2 threads took 137 ms with OpenBLAS threaded and 109 ms with
``OPENBLAS_NUM_THREADS=1``; on a 16-core machine L-BFGS at ``threads=1`` used 742% CPU
(benchmarks/README.md, "The CRF on 16 cores"). A dot product is a memory-bound loop of a few
µs at these sizes: one core does it as fast, and leaves the others to the solver.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, fastmath=True)
def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ_j a_j b_j, on one core (summation reassociated: vectorised)."""
    s = 0.0
    for j in range(a.shape[0]):
        s += a[j] * b[j]
    return s


def norm(a: np.ndarray) -> float:
    """‖a‖₂ = √(a · a), on one core."""
    return math.sqrt(dot(a, a))
