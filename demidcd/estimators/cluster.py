"""Training past one machine (``--backend ray --ray-address ADDR``): every node of the Ray
cluster a local engine on its own part of the data; the driver holds no examples.

**Memory.** ``node K peak memory`` is the peak PSS of the node's actor process (sampled by
:class:`~demidcd.primitives.monitor.CpuMonitor`, plus a reading at the end), object-store
pages it maps counted by its share; the node's raylet and object store are not in it (on a
local cluster the nodes share library pages, which PSS splits among them).

**Parts.** The training file is cut into at most one byte range per node at sentence
boundaries (:func:`~demidcd.io.shards.byte_ranges`, as the set-up in parts on one machine cuts
it; a node left without a range holds no examples; a comma-separated list or glob of files is
dealt out by size instead: :func:`~demidcd.io.shards.file_parts`). Each node reads and encodes
only its part (:class:`~.cluster_node.ClusterNode`).

**One feature space.** The set-up in parts of :mod:`.parts`, its stages on the nodes: each
node counts its part's features (the featurizer's ``count_part``: every count ≥ 1, packed
strings and counts); a featurizer made here with the estimator's parameters merges them
(``merge_parts``: summed, cut at ``min_count``, ordered as the serial dictionary is ordered)
and becomes the model's; each node receives only its part's map "index in its count table →
final id" and encodes its part with it (``encode_part``). The seen (feature, label) pairs are
the union of the parts'. With ``--hashing`` there is no dictionary to merge. The result is the
serial set-up's feature space, id for id.

**What a node runs.** One actor (one process) holding the node's CPUs (Ray's ``CPU``
resource of the node), with as many learner threads (fewer when its part has fewer
examples; the log's node line says how many): Hybrid-DCA's asynchronous cores inside the
node. The part's examples are cut into one contiguous range a thread (about equal tokens);
each thread runs the part's local DCD on its range with its own active sets and φ pool,
all on the node's one local u (v for inference), every add atomic, so the node's change
u − base stays Φ_k Δα to rounding; thread 0 also merges (applies the others' changes,
commits the node's summed change, evaluates, pauses) while the others train on
(:class:`~demidcd.solvers.cocoa.LocalPart`, ``lanes``). One σ′ = K across nodes: the
threads share their node's subproblem, they do not add parts. The numba kernels release the
GIL; the Python between them runs once a chunk of ``--batch`` examples.

**Merges.** Each node solves CoCoA+'s local subproblem on its part
(:mod:`demidcd.solvers.cocoa`) and its change Δw_k is *added* to w (γ = 1) with CoCoA+'s
safe σ′ = K for every coordinate (per coordinate, σ′_j = the number of parts whose examples
fire coordinate j's feature, which :class:`~demidcd.solvers.cocoa.LocalPart` also takes, is
safe and never larger, but scales each φ by √σ′_j and so stores a float64 per entry in the φ
pool, not ±1). A node commits its change every
:data:`~.cluster_node.COMMIT_SECONDS`
(longer when a scan of w costs more). The driver keeps one pull in flight per node, adds
each change to w as it comes (no barrier) and forwards it to the other nodes through one
object in the object store. w = Σ_k Σ_{i∈P_k} α_i φ_i holds exactly once every change has
arrived: at the end, and after every resynchronisation.

**Objective and stop.** Every ``--eval-every`` s (default :data:`EVAL_SECONDS`) the driver
sends a copy of w to the nodes, which add their loss terms at it between slices: the primal
½‖w‖² + Σ_k C Σ_{i∈P_k} ξ_i²; the dual Σ_k (Σ Δ·α − Σ A_i²/(4C)) − ½‖w‖² from the nodes'
latest terms (approximate during the run: changes in flight). The final gap is certified: the
nodes stop, their last changes are merged, and the primal and dual are taken at that one w.
The run stops at ``--time-limit``, on Ctrl-C, or when every node has finished an epoch with no
violator above tol and max |PG| < tol twice in a row, the second epoch begun after every node
was so (the one-machine rule, per part), and an evaluation at one w then finds a relative gap
of at most :data:`CONVERGED_GAP` (the parts' rules see stale views of w: alone they stopped
runs at a gap of 2.5%).

**Faults.** A node whose pull fails (its process or machine gone) is lost: its part restarts
on a remaining node (a second actor there) from the part's last α checkpoint (taken every
:data:`CHECKPOINT_SECONDS` in :data:`CHECKPOINT_PIECES` pieces of its examples, one at a time,
φ as the pool stores it; kept by the driver on disk; a piece's examples are saved as they
were when it was taken: each example's α is feasible alone, so any mix of pieces is a
dual point), every node pauses at its next slice
boundary and reports Σ α φ of its part, and w is rebuilt as their sum (w = Σ α φ: nothing lost
or counted twice); the nodes resume from it. Changes of the older generation still in flight
are dropped. The log says so (``node K (...) lost ...; its part restarts on node J``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

from ..errors import DemidcdError, OptionError, WorkerError
from ..io.shards import ByteRange, byte_ranges, file_parts, splittable
from ..solvers.common import StopRequest, TrainResult
from .cluster_node import ClusterNode, versions
from .layout import choose_layout

EVAL_SECONDS = 10.0  # primal/dual in the log this often (--eval-every overrides)
CHECKPOINT_SECONDS = 10.0  # each part's α saved this often,
CHECKPOINT_PIECES = 8  # in this many pieces (one at a time: a node's and the driver's copy of
# a piece is an eighth of the part's φ pool, not the whole pool at once)
PULL_WAIT = 0.2  # a node's pull returns after this long without news
CONVERGED_GAP = 1e-3  # quiet nodes stop the run when the relative gap at one w is this small


def _connect(ray: Any, address: str, debug: bool) -> None:
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        ray.init(address=address, configure_logging=False, log_to_driver=debug,
                 runtime_env={"env_vars": {"PYTHONPATH": pkg}})
    except Exception as e:  # noqa: BLE001 - one line
        text = str(e).strip()
        raise DemidcdError(f"cannot join the Ray cluster at {address}: "
                           f"{text.splitlines()[0] if text else type(e).__name__}") from None


def node_parts(train: str, k: int, conllu: bool, encoding: str
           ) -> list[tuple[str | list[str], ByteRange | None]]:
    """(path, its byte range; None: nothing) or (list of files, None) for each of ``k``
    nodes."""
    if "," in train or (any(c in train for c in "*?[") and not os.path.exists(train)):
        return [(files, None) for files in file_parts(train, k)]
    if not splittable(train, encoding):
        raise OptionError(f"--train {train}: --ray-address cuts a plain file (not standard "
                          "input or .gz, an ASCII-compatible --encoding) or takes a list or "
                          "glob of files")
    ranges = byte_ranges(train, k, conllu, encoding) or \
        [ByteRange(0, os.path.getsize(train), 0)]  # (one node, or an empty file)
    return [(train, r) for r in ranges] + [(train, None)] * (k - len(ranges))


def _pairs(codes: list[np.ndarray | None], F: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of the parts' seen pairs (codes f·K + y) as (off int64[F+1], lab int32)."""
    u = np.unique(np.concatenate([c for c in codes if c is not None] or
                                 [np.zeros(0, np.int64)]))
    off = np.zeros(F + 1, np.int64)
    np.add.at(off, (u // K) + 1, 1)
    return np.cumsum(off), (u % K).astype(np.int32)


CLUSTER_ALGORITHMS = ("demi-dcd", "dcd", "dcd-light", "multi-dcd")


def _cpus(node: dict) -> int:
    """The CPUs Ray lists for ``node`` (an entry of ``ray.nodes()``)."""
    return int(node.get("Resources", {}).get("CPU", 1))


def runs_on_cluster(est: Any, plan: Any) -> bool:
    """Whether ``--backend ray --ray-address`` trains with a local engine on every node (this
    module): the sequence tagger's built-in features (no template, no feature dicts) with a
    DCD learner. Other tasks and learners keep the inference actors of
    :mod:`demidcd.parallel.ray` (the learner on the driver)."""
    from .sequence import SequenceTagger

    return (plan.backend == "ray" and bool(plan.ray_address) and type(est) is SequenceTagger
            and est.template is None and plan.algorithm in CLUSTER_ALGORITHMS)


def check_versions(infos: list[dict], mine: dict, where: list[str]) -> None:
    """A one-line :class:`DemidcdError` naming the first node whose demidcd or Python version
    differs from the driver's (``infos``: each node's :func:`~.cluster_node.versions`)."""
    for k, info in enumerate(infos):
        for what in ("demidcd", "python"):
            if info.get(what) != mine[what]:
                raise DemidcdError(
                    f"node {k + 1} ({where[k]}) runs {what} {info.get(what)}, this driver "
                    f"{mine[what]}: refused (every node needs the same demidcd and Python)")


class ClusterRun:
    """The driver of one cluster run (module docstring)."""

    def __init__(self, est: Any, plan: Any, options: Any, spec: Any, log: Any,
                 address: str, debug: bool = False):
        self.est, self.plan, self.options, self.spec = est, plan, options, spec
        self.config = plan.config
        self.say = log
        self.address, self.debug = address, debug
        self.ray: Any = None
        self.actors: list[Any] = []
        self.where: list[str] = []  # node k's address
        self.node_ids: list[str] = []
        self.ckpt_dir = tempfile.mkdtemp(prefix="demidcd-cluster-")
        self.ckpt_at: list[float | None] = []
        self.bytes = 0
        self.lost: list[str] = []
        self.flaky: dict[int, int] = {}  # pulls failed in a row by parts that still answered

    # ------------------------------------------------------------------ set-up
    def _check_options(self) -> None:
        est, plan = self.est, self.plan
        if not runs_on_cluster(est, plan):
            raise OptionError("a local engine on every node trains the sequence task's "
                              "built-in features with a DCD learner")
        if getattr(est, "resume", None) or getattr(est, "init", None):
            raise OptionError("--resume/--init are not taken with --ray-address")
        if not self.options.train:
            raise OptionError("--ray-address: each node reads its part of --train FILE "
                              "(a file every node can read, or a list or glob of files)")

    def start(self) -> None:
        from ..parallel.ray import probe_address, require_ray

        ray = self.ray = require_ray()
        probe_address(self.address)  # an address nothing answers at: one line, at once
        self._check_options()
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
        _connect(ray, self.address, self.debug)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if not nodes:
            raise DemidcdError(f"the Ray cluster at {self.address} has no live node")
        self.nodes = nodes
        self.K = len(nodes)
        mine = versions()
        cls = ray.remote(max_restarts=0, max_concurrency=8)(ClusterNode)
        self.cls = cls
        for k, n in enumerate(nodes):
            self.actors.append(self._actor(k, n, _cpus(n)))
            self.where.append(n.get("NodeManagerAddress", "?"))
            self.node_ids.append(n["NodeID"])
        infos = ray.get([a.info.remote() for a in self.actors])
        check_versions(infos, mine, self.where)
        self.infos = infos
        self.ckpt_at = [None] * self.K

    def _actor(self, k: int, node: dict, cpus: float) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return self.cls.options(
            num_cpus=cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(k)

    def _read_args(self) -> tuple:
        from ..io.tagged import first_columns_state

        opts = self.options
        one = opts.train.split(",")[0] if "," in opts.train else opts.train
        fmt, column, features, _ = self.spec.read_plan(one, opts, True)
        state = first_columns_state(one, opts.encoding) \
            if fmt == "columns" and os.path.isfile(one) else None
        return (fmt, column, tuple(features), opts.encoding, opts.max_sentence_length,
                self.spec.unknown_label(opts), state)

    def set_up(self) -> None:
        """Read, count, merge, encode and bind on every node (module docstring)."""
        ray, est = self.ray, self.est
        t0 = time.perf_counter()
        self.read_args = self._read_args()
        self.parts = node_parts(self.options.train, self.K, self.read_args[0] == "conllu",
                            self.options.encoding)
        reads = ray.get([a.read.remote(p, r, *self.read_args)
                         for a, (p, r) in zip(self.actors, self.parts, strict=True)])
        self.reads = reads
        if not any(r["examples"] for r in reads):
            raise OptionError(f"--train {self.options.train}: no sentences found")
        if any(r["partial"] for r in reads):
            raise OptionError("partially labelled data (unknown or set labels) trains on one "
                              "machine (CCCP, or --algorithm crf); --ray-address needs every "
                              "token labelled")
        classes = sorted({t for r in reads for t in r["labels"]})
        est._begin_fit(None)
        for attr in ("coef_", "result_", "seen_pairs_"):
            est.__dict__.pop(attr, None)
        featurizer = est._new_featurizer("word")  # (merges the nodes' counts: the model's)
        if not featurizer.supports_parts:
            raise OptionError("--ray-address trains the built-in base features")
        self.count_params = (featurizer.min_count, featurizer.hashing, featurizer.template)
        counted = ray.get([a.count.remote(self.count_params) for a in self.actors])
        full = [k for k, r in enumerate(reads) if r["examples"]]  # (an empty part counts none)
        try:
            merged = featurizer.merge_parts([counted[k] for k in full])
        except ValueError as e:  # tokens of different widths in different parts
            raise OptionError(f"--train {self.options.train}: {e}") from None
        del counted
        payloads: list[Any] = [None] * self.K
        for k, p in zip(full, merged, strict=True):
            payloads[k] = p
        est.classes_ = classes
        est.__dict__["_featurizer"] = featurizer
        est.n_features_, est.n_bfeatures_ = featurizer.n_features, 0
        F, K = featurizer.n_features, len(classes)
        self.F = F
        weights = est._weights()
        self.payload_refs = [ray.put(p) for p in payloads]
        del payloads, merged
        self.classes = classes
        enc = ray.get([a.encode.remote(ref, F, classes, weights != "all")
                       for a, ref in zip(self.actors, self.payload_refs, strict=True)])
        nf = np.zeros(F, np.int64)  # parts that fire each feature (the log's share on one)
        for _, _, fired in enc:
            nf += np.unpackbits(fired, count=F)
        pairs = None
        if weights != "all":
            pairs = _pairs([c for c, _, _ in enc], F, K)
            if weights == "auto":
                choice = choose_layout(F, K, 0, int(pairs[1].shape[0]),
                                       sum(b for _, b, _ in enc))
                self.say(choice.reason())
                if choice.layout == "all":
                    pairs = None
        est.seen_pairs_ = pairs
        self.pairs_ref = ray.put(pairs)
        self.nf_ref = None  # one σ′ = K (module docstring, "Merges")
        bound = ray.get([a.bind.remote(self.pairs_ref, self.config, self.K, self.nf_ref,
                                       self.config.seed, _cpus(n))
                         for a, n in zip(self.actors, self.nodes, strict=True)])
        self.dim = bound[0][0]
        self.lanes = [b[1] for b in bound]  # training threads per node (its cores)
        self.pieces = [max(CHECKPOINT_PIECES, L) for L in self.lanes]
        for k, r in enumerate(self.reads):
            cpus, L = _cpus(self.nodes[k]), self.lanes[k]
            self.say(f"node {k + 1}: {self.where[k]}, {cpus} cores, {L} learner "
                     f"thread{'s' if L != 1 else ''}, {r['examples']:,} examples, "
                     f"{r['tokens']:,} tokens (pid {self.infos[k]['pid']})")
        one = float((nf == 1).mean()) if F else 0.0
        how = f"σ′ = {self.K} (CoCoA+'s safe σ′ = K; {one:.0%} of the features on one node)"
        self.say(f"cluster: {self.K} nodes, features counted on each and merged ({F:,} "
                 f"features, {K} labels, |w| {self.dim:,}); changes added with {how}; "
                 f"set-up {time.perf_counter() - t0:.1f}s")

    # ------------------------------------------------------------------ training
    def train(self) -> TrainResult:
        ray, cfg = self.ray, self.config
        w = np.zeros(self.dim)
        self.gen = 0
        zero = ray.put(w)
        ray.get([a.resume.remote(0, zero) for a in self.actors])
        del zero
        t0 = time.perf_counter()
        limit = cfg.time_limit
        every = cfg.eval_every or EVAL_SECONDS
        pulls = {a.pull.remote(PULL_WAIT): k for k, a in enumerate(self.actors)}
        terms = [(0.0, 0.0)] * self.K
        last_epoch = [0] * self.K
        quiet = [False] * self.K
        marks: list[int] | None = None
        candidate: int | None = None  # the evaluation that decides a stop
        next_candidate = 0.0
        updates = 0
        history: list[dict] = []
        evals: dict[int, list] = {}
        eid, next_eval, next_ckpt = 0, every, CHECKPOINT_SECONDS
        ckpts: dict[Any, tuple[int, int]] = {}  # a piece in flight: (part, piece)
        ckpt_began = [0.0] * self.K
        snap = None
        if self.est.snapshot_dir is not None:  # as on one machine: base.npz, then w's
            from ..io.snapshots import Snapshotter

            snap = Snapshotter(self.est.snapshot_dir, self.est.snapshot_every or 5.0)
            self.est.coef_, self.est.result_ = np.zeros(self.dim), None
            self.est.save(os.path.join(self.est.snapshot_dir, "base.npz"))
        reason = "time-limit"
        try:
            while True:
                now = time.perf_counter() - t0
                if StopRequest.requested:
                    reason = "interrupted"
                    break
                if limit and now >= limit:
                    reason = "time-limit"
                    break
                if marks is not None and all(quiet) and candidate is None and \
                        now >= next_candidate and \
                        all(last_epoch[k] > marks[k] for k in range(self.K)):
                    next_eval = now  # quiet everywhere: the gap at one w decides
                    candidate = eid + 1
                done, _ = ray.wait(list(pulls), num_returns=1, timeout=0.05)
                for ref in done:
                    k = pulls.pop(ref)
                    try:
                        gen, idx, val, tm, eps, evs, err = ray.get(ref)
                    except Exception as e:  # noqa: BLE001 - the node is gone
                        w = self._lost(k, e, w, now, pulls)
                        quiet, marks = [False] * self.K, None
                        evals.clear()  # the lost node will not answer; the next one will do
                        candidate = None
                        next_eval = time.perf_counter() - t0
                        continue
                    self.flaky.pop(k, None)
                    if err is not None:
                        raise WorkerError(f"node {k + 1}: {err.strip().splitlines()[-1]}",
                                          err)
                    if gen == self.gen and len(idx):
                        np.add.at(w, idx, val)
                        msg = ray.put((idx, val))  # one object, K - 1 readers
                        for j, a in enumerate(self.actors):
                            if j != k:
                                a.offer.remote(gen, msg)
                        self.bytes += (idx.nbytes + val.nbytes) * self.K
                    terms[k] = tm
                    for ep in eps:
                        last_epoch[k], quiet[k] = ep["epoch"], ep["quiet"]
                        updates += ep["updates"]
                    for e_id, loss, _nv in evs:
                        if e_id in evals:
                            evals[e_id][1].append(loss)
                    pulls[self.actors[k].pull.remote(PULL_WAIT)] = k
                if all(quiet):
                    if marks is None:
                        marks = list(last_epoch)
                else:
                    marks = None
                stop = False
                for e_id in [e for e, v in evals.items() if len(v[1]) == self.K]:
                    ws, losses, at, tm = evals.pop(e_id)
                    rec = self._record(len(history) + 1, at, updates, ws, sum(losses), tm)
                    history.append(rec)
                    if self.est.callback is not None:
                        self.est.callback(rec, ws)
                    if e_id == candidate:
                        stop = rec["gap"] <= CONVERGED_GAP
                        candidate, marks = None, None
                        next_candidate = now + max(2.0, every / 5)  # (not every epoch)
                if stop:
                    reason = "converged"
                    break
                if now >= next_eval and not evals:
                    eid += 1
                    ws = w.copy()
                    ref = ray.put(ws)
                    for a in self.actors:
                        a.evaluate.remote(eid, ref)
                    evals[eid] = [ws, [], round(now, 3), list(terms)]
                    next_eval = now + every
                if now >= next_ckpt and not ckpts:
                    for k in range(self.K):
                        ckpts[self.actors[k].checkpoint.remote(0, self.pieces[k])] = (k, 0)
                        ckpt_began[k] = now
                    next_ckpt = now + CHECKPOINT_SECONDS
                if ckpts:
                    got, _ = ray.wait(list(ckpts), num_returns=len(ckpts), timeout=0)
                    for ref in got:
                        k, j = ckpts.pop(ref)
                        try:
                            st = ray.get(ref)
                        except Exception:  # noqa: BLE001 - a lost node: its pull tells
                            continue
                        if st is not None and self._save_piece(k, j, st):
                            self.ckpt_at[k] = ckpt_began[k]
                        elif st is not None:
                            ckpts[self.actors[k].checkpoint.remote(j + 1, self.pieces[k])] \
                                = (k, j + 1)
                        del st
                if snap is not None:
                    snap.maybe(now, w)
        except KeyboardInterrupt:
            reason = "interrupted"
        seconds = time.perf_counter() - t0
        # the end: every node stops, its last change is merged: w = Σ α φ exactly
        finals = self._gather([a.stop.remote() for a in self.actors])
        for k, f in enumerate(finals):
            if f is None:
                continue
            gen, idx, val, tm, eps, _, _ = f
            if gen == self.gen and len(idx):
                np.add.at(w, idx, val)
            terms[k] = tm
            for ep in eps:
                updates += ep["updates"]
        ref = ray.put(w)
        losses = self._gather([a.final_loss.remote(ref) for a in self.actors])
        rec = self._record(len(history) + 1, round(seconds, 3), updates, w,
                           sum(x[0] for x in losses if x is not None), terms)
        history.append(rec)
        if self.est.callback is not None:
            self.est.callback(rec, w)
        if snap is not None:
            snap.maybe(seconds, w, force=True)
            snap.close()
        peaks = self._gather([a.peak.remote() for a in self.actors])
        lines, nodes = [], []
        for k, p in enumerate(peaks):
            if p is None:
                continue
            cpus = _cpus(self.nodes[k]) if k < len(self.nodes) else 1
            tc = p.get("thread_cpu") or []
            lines.append(f"node {k + 1} peak memory: {p['peak_mib']:,.0f} MiB (PSS of its "
                         f"process), average CPU {p['cpu']:.0f}% of {100 * max(cpus, 1)}%; "
                         f"{len(tc)} learner thread{'s' if len(tc) != 1 else ''}, CPU "
                         + ", ".join(f"{x:.1f}" for x in tc) + " s")
            nodes.append({"node": k + 1, "address": self.where[k], "peak_mib": p["peak_mib"],
                          "cpu_pct": p["cpu"], "learner_threads": len(tc),
                          "thread_cpu_s": tc})
        for line in lines:
            self.say(line)
        top = max((n["peak_mib"] for n in nodes), default=0.0)
        self.say(f"merge traffic: {self.bytes / max(seconds, 1e-9) / 2**20:.2f} MiB/s "
                 f"({self.bytes / 2**20:,.1f} MiB in {seconds:.1f}s)")
        res = TrainResult(w, reason == "converged", reason, max(last_epoch), seconds, history,
                          rec["dual"])
        res.extra.update(nodes=nodes, memory_line=f"peak memory: {top:,.0f} MiB (PSS, the "
                         f"largest node; per node above)", merge_bytes=self.bytes,
                         lost=list(self.lost))
        return res

    def _piece_path(self, k: int, j: int, new: bool = False) -> str:
        return os.path.join(self.ckpt_dir, f"part-{k}{'.new' if new else ''}-{j}.npz")

    def _save_piece(self, k: int, j: int, st: dict) -> bool:
        """Save piece j of part k's checkpoint; the last piece replaces the part's previous
        checkpoint by the new one (a restart reads only a whole one). Returns whether it was
        the last."""
        np.savez(self._piece_path(k, j, new=True), **st)
        if j + 1 < self.pieces[k]:
            return False
        for i in range(self.pieces[k]):
            os.replace(self._piece_path(k, i, new=True), self._piece_path(k, i))
        return True

    def _record(self, epoch: int, at: float, updates: int, w: np.ndarray, loss: float,
                terms: list) -> dict:
        half = 0.5 * float(w @ w)
        primal = half + loss
        lin = sum(t[0] for t in terms)
        sq = sum(t[1] for t in terms)
        dual = lin - half - (sq / (4.0 * self.config.C) if self.config.loss == "l2" else 0.0)
        return {"epoch": epoch, "seconds": at, "total_updates": int(updates),
                "primal": primal, "dual": dual,
                "gap": (primal - dual) / max(abs(primal), 1e-300)}

    def _gather(self, refs: list, timeout: float = 60.0) -> list:
        """ray.get of each ref, None for those that fail (a node lost at the end)."""
        out = []
        for r in refs:
            try:
                out.append(self.ray.get(r, timeout=timeout))
            except Exception:  # noqa: BLE001
                out.append(None)
        return out

    def _silent(self, among: list[int], timeout: float = 30.0) -> set[int]:
        """The parts in ``among`` whose actor does not answer a ping within ``timeout`` s (its
        node gone: Ray may list a killed node as alive for tens of seconds)."""
        refs = {self.actors[j].info.remote(): j for j in among}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        answered = set()
        for r in ready:
            try:
                self.ray.get(r)
                answered.add(refs[r])
            except Exception:  # noqa: BLE001 - gone
                pass
        return set(among) - answered

    def _lost(self, k: int, e: Exception, w: np.ndarray, now: float, pulls: dict
              ) -> np.ndarray:
        """Part k's pull failed: every part whose actor is gone restarts on a node whose actor
        answers, from its α checkpoint, and w is rebuilt as Σ α φ of every part (module
        docstring). A node lost while recovering is recovered in the same way."""
        why = type(e).__name__
        self.flaky[k] = self.flaky.get(k, 0) + 1
        if self.flaky[k] <= 3 and not self._silent([k], timeout=10.0):
            pulls[self.actors[k].pull.remote(PULL_WAIT)] = k  # transient: it answers
            return w
        self.flaky[k] = 0
        gone = {k} | self._silent([j for j in range(self.K) if j != k])
        for _attempt in range(4):
            hosts = [j for j in range(self.K) if j not in gone]
            if not hosts:
                raise WorkerError(f"node {k + 1} ({self.where[k]}) lost ({why}) and no node is "
                                  "left", str(e))
            for ref, kk in list(pulls.items()):
                if kk in gone:
                    del pulls[ref]
            try:
                for i, kk in enumerate(sorted(gone)):
                    self._restart(kk, hosts[i % len(hosts)], why, now)
                return self._resync(pulls)
            except Exception as again:  # noqa: BLE001 - another node went meanwhile
                why = type(again).__name__
                gone = self._silent(list(range(self.K)))
                if not gone:
                    raise
        raise WorkerError("the cluster kept losing nodes while recovering", str(e))

    def _restart(self, k: int, j: int, why: str, now: float) -> None:
        """Part k on a new actor on node j's machine, from its α checkpoint."""
        ray = self.ray
        at = self.ckpt_at[k]
        self.say(f"node {k + 1} ({self.where[k]}) lost ({why}) at {now:.1f}s: its part "
                 f"restarts on node {j + 1} ({self.where[j]}) from "
                 + (f"its α checkpoint of {at:.1f}s" if at is not None else "α = 0 (no "
                    "checkpoint yet)"))
        self.lost.append(f"node {k + 1} at {now:.1f}s")
        try:
            ray.kill(self.actors[k], no_restart=True)
        except Exception:  # noqa: BLE001 - gone already
            pass
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        a = self.cls.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            self.node_ids[j], soft=False)).remote(k)
        self.actors[k] = a
        p, r = self.parts[k]
        ray.get(a.read.remote(p, r, *self.read_args))
        ray.get(a.count.remote(self.count_params))  # (the same counts: the same map applies)
        ray.get(a.encode.remote(self.payload_refs[k], self.F, self.classes, False))
        ray.get(a.bind.remote(self.pairs_ref, self.config, self.K, self.nf_ref,
                              self.config.seed + 1000 * (len(self.lost)), self.lanes[k]))
        # (its threads as before: they share node j's cores with node j's own; any number
        # of threads restores the checkpoint, LocalPart.restore_checkpoint)
        ck = at is not None
        for i in range(self.pieces[k] if ck else 0):  # one piece at a time
            with np.load(self._piece_path(k, i), allow_pickle=False) as z:
                ray.get(a.restore.remote({name: z[name] for name in z.files}))
        self.node_ids[k] = self.node_ids[j]
        self.where[k] = self.where[j] if self.where[j].endswith("(moved)") \
            else f"{self.where[j]} (moved)"
        self.say(f"node {k + 1}: part restarted ({'checkpoint' if ck else 'from α = 0'})")

    def _resync(self, pulls: dict) -> np.ndarray:
        """Every part pauses and reports Σ α φ; w is their sum, and every part resumes from it
        in a new generation (a barrier on the fault path only)."""
        ray = self.ray
        self.gen += 1
        refs = [x.pause.remote(self.gen) for x in self.actors]
        w = np.zeros(self.dim)
        for r in refs:
            w += ray.get(r)
        ref = ray.put(w)
        ray.get([x.resume.remote(self.gen, ref) for x in self.actors])
        live = set(pulls.values())
        for k, a in enumerate(self.actors):
            if k not in live:
                pulls[a.pull.remote(PULL_WAIT)] = k
        self.say(f"w rebuilt as Σ α φ over {self.K} parts; training goes on")
        return w

    def close(self) -> None:
        """Kill the actors (a node's processes end with them), disconnect, drop checkpoints."""
        ray = self.ray
        try:
            if ray is not None and ray.is_initialized():
                for a in self.actors:
                    if a is not None:
                        try:
                            ray.kill(a, no_restart=True)
                        except Exception:  # noqa: BLE001
                            pass
                ray.shutdown()
        finally:
            shutil.rmtree(self.ckpt_dir, ignore_errors=True)


def fit_on_cluster(est: Any, plan: Any, options: Any, spec: Any, log: Any, address: str,
                   debug: bool = False) -> TrainResult:
    """Train ``est`` on the Ray cluster at ``address`` (module docstring); sets ``coef_``,
    ``result_`` and ``plan_`` as a one-machine fit does."""
    run = ClusterRun(est, plan, options, spec, log, address, debug)
    try:
        run.start()
        run.set_up()
        res = run.train()
    finally:
        run.close()
    est.plan_ = plan
    est.coef_, est.result_ = res.w, res
    return res
