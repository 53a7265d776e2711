"""Primitives of the parallel engine, below every learner and transport: shared-memory arenas
(:mod:`.shm`), the seqlock and cache-line marks (:mod:`.seqlock`), single-producer rings
(:mod:`.ring`) and the CPU monitor (:mod:`.monitor`). They import nothing above the tasks'
record format."""
