"""Joint entity and relation recognition (CoNLL04; Roth & Yih 2004) as a 0-1 ILP task.

Modules: :mod:`.features` (feature strings and their ids), :mod:`.task` (the task and its
numba kernels: scores, exact inference, records), :mod:`.ilp` (the ILP and its exact branch
and bound), :mod:`.cbc` (CBC in a watched subprocess), :mod:`.highs` (HiGHS in process),
:mod:`.inference` (the solvers by name and the default time cap), :mod:`.spec` (the command
line's adapter, registered as ``demidcd.tasks.entity_relation.spec:SPEC``).
"""
