"""Inner products for the solvers' loops, serial and without the GIL.

numpy's ``a @ b`` on two vectors calls BLAS (OpenBLAS's ``ddot`` in numpy's wheels), which
splits vectors longer than 10,000 entries over all the machine's cores; its threads then spin
(busy-wait) for the next call instead of sleeping, and between the calls of a training loop they
take the cores from the solver's own threads (measured: benchmarks/README.md, "The CRF on 16
cores, and BLAS's spinning threads"). A dot product over a weight vector is a memory-bound loop
of microseconds: one core does it as fast, and leaves the others to the solver.
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
