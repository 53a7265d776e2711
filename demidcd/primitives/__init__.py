"""Primitives of the parallel engine, below every learner and transport: shared-memory arenas
(:mod:`.shm`), the seqlock and cache-line marks (:mod:`.seqlock`), single-producer rings
(:mod:`.ring`), the CPU monitor (:mod:`.monitor`), resident pages handed back
(:mod:`.pages`) and inner products on one core (:mod:`.vectors`). They import nothing above
the tasks' record format."""
