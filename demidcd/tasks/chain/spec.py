"""The chain tasks' registry entries (:class:`~demidcd.tasks.TaskSpec`), the CLI adapter of
:mod:`demidcd.tasks.chain`: reading, writing and reporting tagged files, the column options
(``--column``, ``--feature-columns``), and building the estimator.

``sequence`` (:data:`SPEC`) scores by token accuracy. ``chunking`` and ``ner`` (:data:`CHUNKING`,
:data:`NER`) are the same task with labels read as chunks (BIO / IOB1 / IOB2 / BIOES) and scored
by chunk precision, recall and F1 exactly as ``conlleval`` scores them (:mod:`.chunks`).
Training is unchanged (Hamming Δ over the chunk tags); only the metric, the report and the
estimator's ``score`` differ.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np

from ...options import DataOptions, OutputOptions, default
from .. import TaskSpec
from .chunks import format_report

MAX_NBEST = 100_000
"""The most taggings ``--nbest`` prints per sentence (k-best Viterbi keeps k entries per label
and position: a larger K is a typo, e.g. 10**400 reached the kernel as an integer it cannot
type)."""


def _parse_column(c: str | int | None) -> str | int | None:
    """``--column``: None, ``upos`` / ``xpos`` (any case: ``XPOS``), or a 1-based column
    number."""
    if isinstance(c, str) and c.strip().lower() in ("upos", "xpos"):
        return c.strip().lower()
    if c is None or isinstance(c, int):
        return c
    try:
        return int(c)
    except ValueError:
        from ...errors import OptionError

        raise OptionError(f"--column must be upos, xpos or a column number, got {c!r}") from None


def _parse_feature_columns(c: str | list | None) -> tuple[str | int, ...]:
    """``--feature-columns 2`` or ``2,3`` (1-based; ``upos``/``xpos`` in CoNLL-U)."""
    if c is None or c == "":
        return ()
    if isinstance(c, list | tuple):
        return tuple(c)
    out = []
    for x in str(c).split(","):
        x = x.strip().lower()
        if x in ("upos", "xpos"):
            out.append(x)
        elif x.isdigit():
            out.append(int(x))
        elif x:
            from ...errors import OptionError

            raise OptionError(f"--feature-columns takes 1-based column numbers such as 2 or 2,3 "
                              f"(upos/xpos in CoNLL-U), got {c!r}")
    return tuple(out)


def _named_format(opts: dict) -> str | None:
    """The training format of a model that did not record it: CoNLL-U when a remembered column
    is named (upos / xpos), else unknown."""
    named = [opts.get("column"), *(opts.get("feature_columns") or ())]
    return "conllu" if any(c in ("upos", "xpos") for c in named) else None


class SequenceSpec(TaskSpec):
    """First-order chain labelling of CoNLL-U or whitespace-column files, token accuracy.

    What :meth:`configure` derives from a loaded model (``options.derived``):
    ``column_given`` / ``feature_columns_given`` (whether --column / --feature-columns were
    given, or are the model's), ``model_format`` (the format the model was trained on),
    ``templated`` (the tokens are every column but the label: a template model, or
    ``all_columns`` of :func:`~demidcd.datasets.load_tagged`) and ``template_width`` (a
    template model's number of columns)."""

    name = "sequence"
    help = "sequence labelling (POS tagging), scored by token accuracy"
    estimator = "demidcd.estimators.sequence:SequenceTagger"
    max_sentence_length = 10_000  # Viterbi is linear in n: a limit only for files without breaks
    length_cost = "Viterbi is linear in n; a file without blank lines reads as one sentence"

    def _format(self, path: str, options: DataOptions) -> str:
        """``--format``; auto: by the file name, or for ``-`` (standard input) by content."""
        from ...io.tagged import resolve_format

        return resolve_format(path, options.format or "auto")

    def read(self, path: str, options: DataOptions, labelled: bool = True) -> Any:
        from ...io.tagged import read_tagged, token_columns

        fmt, column, features, templated = self.read_plan(path, options, labelled)
        # the original lines are for writing predictions (unlabelled reads) and for the
        # feature and template columns; a labelled corpus without them keeps only the tokens
        data = read_tagged(path, fmt=fmt, column=column, encoding=options.encoding,
                           max_sentence_length=options.max_sentence_length, labelled=labelled,
                           keep_raw=not labelled or bool(features) or templated,
                           feature_columns=features,
                           unknown_label=self.unknown_label(options) if labelled else None)
        if templated:
            data.columns = token_columns(data, options.derived.get("template_width"))
        if data.n_unknown or data.n_sets:
            self.check_partial(data, options)
        return data

    @staticmethod
    def unknown_label(options: DataOptions) -> str:
        """``--unknown-label`` (not given: the table's default, ``?``; ``''``: off)."""
        u = options.unknown_label
        return default("unknown_label") if u is None else u

    def check_partial(self, data: Any, options: DataOptions) -> None:
        """A partially labelled file whose sentence admits no tagging consistent with its
        cells under the label scheme: an InputError naming the file and the line of the cell
        where the taggings run out (chunking, ner; a plain tagging always admits one)."""

    def read_plan(self, path: str, options: DataOptions, labelled: bool = True
                  ) -> tuple[str, str | int | None, tuple[str | int, ...], bool]:
        """How :meth:`read` reads ``path``: (format, label column, feature columns, whether
        the tokens are a template's columns)."""
        fmt = self._format(path, options)
        column, features = self._columns(fmt, path, options, labelled)
        if not labelled and fmt == "columns" and not options.derived.get("column_given", False):
            column = None  # predict on columns: the labels go into a new last column
        templated = bool(options.derived.get("templated", options.template is not None))
        if templated and features:
            from ...errors import OptionError

            raise OptionError("--feature-columns is for the built-in features; with --template "
                              "every column but the label is a token column")
        return fmt, column, features, templated

    def _columns(self, fmt: str, path: str, options: DataOptions, labelled: bool
                 ) -> tuple[str | int | None, tuple[str | int, ...]]:
        """The label column and feature columns to read ``path`` (format ``fmt``) with: the
        options given, else the model's, mapped to ``fmt`` when the model was trained on the
        other format. CoNLL-U model on a columns file: the label is the last column; a columns
        model on CoNLL-U: UPOS when it took the last column (a warning names --column xpos),
        else ambiguous (an error asks for --column); remembered feature columns never map (an
        error asks for --feature-columns)."""
        import warnings

        from ...errors import InputWarning, OptionError
        from ...io.text_source import source_name

        column = _parse_column(options.column)
        features = _parse_feature_columns(options.feature_columns)
        trained = options.derived.get("model_format")  # from configure (evaluate / predict)
        if trained is None or trained == fmt:
            return column, features
        name = source_name(path)
        kind = {"conllu": "CoNLL-U", "columns": "a columns file"}
        if features and not options.derived.get("feature_columns_given", True):
            use = "upos or xpos (or 3..10)" if fmt == "conllu" else "N (1-based numbers)"
            raise OptionError(
                f"the model was trained on {kind[trained]} with feature columns "
                f"{','.join(map(str, features))}; {name} is {kind[fmt]}: give "
                f"--feature-columns {use}")
        if options.derived.get("column_given", True):
            return column, features
        if trained == "conllu":  # None: CoNLL-U's default label column, UPOS
            was = {None: "UPOS", "upos": "UPOS", "xpos": "XPOS"}.get(column, f"column {column}")
        else:
            was = "the last column" if column is None else f"column {column}"
        if fmt == "columns":  # the label (or the prediction) is the last column
            if labelled:
                warnings.warn(InputWarning(
                    f"the model was trained on CoNLL-U (labels in {was}); {name} is a columns "
                    "file: its last column is read as the labels (give --column N for "
                    "another)"), stacklevel=2)
            return None, features
        if column is None:
            warnings.warn(InputWarning(
                f"the model was trained on a columns file (labels in the last column); {name} "
                f"is CoNLL-U: {'reading labels from' if labelled else 'writing predictions to'} "
                "UPOS (give --column xpos for XPOS)"), stacklevel=2)
            return "upos", features
        raise OptionError(f"the model was trained on a columns file (labels in {was}); {name} "
                          "is CoNLL-U: give --column upos or xpos")

    def xy(self, data):
        X = data.tokens
        if getattr(data, "columns", None) is not None:
            X = data.columns
        elif data.attributes is not None:
            X = [[(w, *a) for w, a in zip(ws, at, strict=True)]
                 for ws, at in zip(data.tokens, data.attributes, strict=True)]
        return X, data.tags

    def describe(self, data) -> str:
        partial = ""
        if getattr(data, "n_unknown", 0) or getattr(data, "n_sets", 0):
            partial = (f" ({data.n_unknown:,} with an unknown label, {data.n_sets:,} with a "
                       "set of labels)")
        return f"{len(data):,} sentences, {data.n_tokens:,} tokens{partial}"

    def default_data(self, options: DataOptions, seed: int) -> tuple[Any, Any, Any]:
        from ...synthetic import generate_splits

        return generate_splits(seed=seed)

    def make_estimator(self, options: DataOptions, common: dict[str, Any]) -> Any:
        """The tagger; ``--template`` is resolved here, once (a template that does not parse
        fails now, naming its file and line): the estimator holds the :class:`Template`."""
        from .template import resolve_template

        cls = self.estimator_class()
        template = resolve_template(options.template)  # errors: file:line, now
        min_count = options.min_count if options.min_count is not None else \
            None if template is not None else cls._default_min_count
        return cls(min_count=min_count, hashing=options.hashing, template=template,
                   weights=options.weights or default("weights"),
                   **self.estimator_params(options), **common)

    def estimator_params(self, options: DataOptions) -> dict[str, Any]:
        """The estimator's keyword arguments of this task's own options (chunking, ner)."""
        return {}

    def data_options(self, est: Any, options: DataOptions) -> dict[str, Any]:
        train = options.train
        return {"column": _parse_column(options.column),
                "feature_columns": list(_parse_feature_columns(options.feature_columns)),
                "format": self._format(train, options) if train else None,
                "template": getattr(getattr(est, "template", None), "path", None)}

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        """The model's label and feature columns when none are given; ``derived``: what the
        model says about its input (see the class docstring)."""
        from dataclasses import replace

        opts = getattr(est, "data_options_", {}) or {}
        derived = {**options.derived, **self._template_derived(est, options),
                   "column_given": options.column is not None,
                   "feature_columns_given": options.feature_columns is not None,
                   "model_format": opts.get("format") or _named_format(opts)}
        return replace(
            options,
            column=opts.get("column") if options.column is None else options.column,
            feature_columns=(opts.get("feature_columns") or None
                             if options.feature_columns is None else options.feature_columns),
            derived=MappingProxyType(derived))

    @staticmethod
    def _template_derived(est: Any, options: DataOptions) -> dict[str, Any]:
        """A template model reads every column but the label (``templated``; its number of
        columns: ``template_width``); a --template given must be the model's."""
        from ...errors import OptionError
        from .template import TemplateFeaturizer, resolve_template

        f = getattr(est, "featurizer_", None)
        model = f.template if isinstance(f, TemplateFeaturizer) else None
        given = resolve_template(options.template)
        if given is not None and (model is None or given.text != model.text):
            had = f"the template {model.path}" if model is not None else "the built-in features"
            raise OptionError(f"--template {given.path}: the model was trained with {had}; "
                              "drop --template (the model's is used)")
        return {"templated": model is not None,
                "template_width": f.n_columns if model is not None else None}

    def label_counts(self, data) -> dict[str, int] | None:
        """Tokens per gold label (partial cells not counted)."""
        from collections import Counter

        if not data.labelled:
            return None
        counts: Counter[str] = Counter()
        for tags in data.tags:
            counts.update(tags)
        if getattr(data, "n_unknown", 0) or getattr(data, "n_sets", 0):
            counts = Counter({t: n for t, n in counts.items() if isinstance(t, str)})
        return dict(counts)

    def check(self, est, data) -> list[str]:
        if not data.labelled:
            return []
        unknown = est.unknown_labels(data.tags)
        if not unknown:
            return []
        n = sum(unknown.values())
        names = ", ".join(sorted(unknown, key=lambda t: (-unknown[t], t))[:5])
        more = ", ..." if len(unknown) > 5 else ""
        return [f"{n:,} tokens of {data.path or 'the data'} have labels the model does not know "
                f"({len(unknown)} labels: {names}{more}); they count as errors (check --column)"]

    def report(self, est, data, prefix: str = "") -> list[str]:
        X, Y = self.xy(data)
        m = est.metrics(X, Y)
        return [f"{prefix}accuracy: {100 * m['score']:.2f}% ({m['tokens']:,} tokens, "
                f"{len(data):,} sentences)"] + partial_note(m, prefix, "tokens")

    def write(self, path: str, data: Any, predicted: Any, options: DataOptions) -> None:
        from ...io.tagged_writer import write_tagged

        write_tagged(path, data, predicted, column=self.write_column(data.fmt, options),
                     encoding=options.encoding)

    @staticmethod
    def write_column(fmt: str, options: DataOptions) -> str | int | None:
        """The column :meth:`write` puts the labels in (None: the one read, or a new last
        column of a columns file)."""
        column = _parse_column(options.column)
        if fmt == "columns" and not options.derived.get("column_given", False):
            column = None
        return column

    def predict_stream(self, est: Any, options: DataOptions, output: OutputOptions,
                       threads: int, run: Any = None) -> int:
        """``predict``: read ``options.data`` in blocks of sentences, tag them and write them
        to ``output.out`` in order (constant memory; ``threads`` blocks at once); returns the
        number of sentences (:mod:`~demidcd.tasks.chain.stream`)."""
        from .stream import predict_stream

        return predict_stream(self, est, options, output, threads, run)

    # -- predict: n best, forced labels, confidences ----------------------------------------
    def check_options(self, est: Any, options: DataOptions, output: OutputOptions) -> None:
        """The options of other tasks (:meth:`TaskSpec.check_options`: ``--constraints`` is
        for chunking and ner, which have a label scheme); ``--nbest K`` (K >= 1, not with
        ``--scores``). A model fitted on feature dicts cannot read a file: its features are
        the user's dicts."""
        from ...errors import OptionError
        from .template import DictFeaturizer

        super().check_options(est, options, output)
        if isinstance(getattr(est, "featurizer_", None), DictFeaturizer):
            raise OptionError(f"{output.model or 'the model'}: this model was fitted on "
                              "feature dicts in Python, which a file cannot give; tag with "
                              "its predict() on dicts made the same way")
        nbest = output.nbest
        if nbest is not None and not 1 <= nbest <= MAX_NBEST:
            raise OptionError(f"--nbest must be in 1..{MAX_NBEST:,}, got "
                              + (f"{nbest}" if nbest < 10**12 else
                                 f"a number of {len(str(nbest))} digits"))
        if nbest is not None and output.scores:
            raise OptionError("--nbest and --scores cannot be combined (the margins are those "
                              "of the best tagging)")
        if output.marginals:
            if output.scores:
                raise OptionError("--marginals cannot be combined with --scores")
            est._check_probabilistic("--marginals")

    def _given_column(self, data: Any, options: DataOptions) -> str | int | None:
        """The column ``--force`` reads the given labels from: the model's (or --column's)
        label column; for a columns file without one, the last column."""
        column = _parse_column(options.column)
        if data.fmt == "columns":
            return column if isinstance(column, int) else None
        return column

    def predict(self, est: Any, data: Any, options: DataOptions, output: OutputOptions) -> Any:
        """Tags per sentence, or :class:`~demidcd.io.tagged_writer.Blocks` in CRF++'s
        ``crf_test`` layouts: ``--nbest`` (a ``# RANK SCORE`` line before each of the K best
        taggings, as ``crf_test -n``: SCORE = p(y | x) = exp(w·Φ(x, y) − log Z(x)) for a CRF
        model, w·Φ(x, y) for the others), ``--marginals`` (``crf_test -v1``: ``# p(y | x)``
        before each sentence, each label as ``LABEL/p(y_t = LABEL | x)``; ``all``: ``-v2``,
        every label's ``LABEL/p`` cell after it; with ``--nbest`` the cells of each tagging
        under the ``# RANK p`` line, as ``-n -v1``) and ``--scores`` (a ``# SCORE MARGIN``
        line before each sentence, a margin field after each label); ``--force`` keeps the
        given labels the model knows (Wapiti)."""
        from ...io.tagged import column_values
        from ...io.tagged_writer import Blocks

        X = self.xy(data)[0]
        fixed = None
        if output.force:
            known = set(est.classes_)
            feats = _parse_feature_columns(options.feature_columns)
            given = column_values(data, self._given_column(data, options), exclude=feats)
            fixed = [[t if t in known else None for t in s] for s in given]
        nbest, how = output.nbest, output.marginals
        conllu = data.fmt == "conllu"
        if nbest is not None:
            best = est.predict_nbest(X, nbest, fixed)
            logz = est.log_partition(X, fixed) if est.probabilistic else None
            marg = est.predict_marginals(X, fixed) if how else None
            order, tags, heads, extra = [], [], [], []
            for s, taggings in enumerate(best):
                for j, (y, score) in enumerate(taggings):
                    order.append(s)
                    heads.append(f"# {j} {_prob(np.exp(score - logz[s]))}" if logz is not None
                                 else f"# {j} {score:.6f}")
                    y, cells = _with_marginals(y, marg[s], how, conllu) if how else (y, None)
                    tags.append(y)
                    extra.append(cells)
            return Blocks(tags, order, heads, extra if extra and extra[0] is not None else None)
        if output.scores:
            rows = est.predict_scores(X, fixed)
            return Blocks([r[0] for r in rows], list(range(len(rows))),
                          [f"# {r[1]:.6f} {r[2]:.6f}" for r in rows],
                          [[f"{m:.6f}" for m in r[3]] for r in rows])
        if how:
            marg, tags, logp = est.predict_marginals_logp(X, fixed)
            rows = [_with_marginals(ts, ms, how, conllu)
                    for ts, ms in zip(tags, marg, strict=True)]
            return Blocks([r[0] for r in rows], list(range(len(tags))),
                          [f"# {_prob(p)}" for p in np.exp(logp)],
                          None if rows and rows[0][1] is None else [r[1] for r in rows])
        return est.predict(X, fixed=fixed)


def partial_note(m: dict, prefix: str, left_out: str) -> list[str]:
    """The report's line on partially labelled gold data (none when fully labelled)."""
    if not (m.get("unknown") or m.get("sets")):
        return []
    return [f"{prefix}partial labels: {m['unknown']:,} tokens unknown, {m['sets']:,} with a "
            f"set of labels (their {left_out} not scored)"]


def _prob(p: float) -> str:
    """A probability as CRF++ prints it (C++ streams' default: %g, 6 significant digits)."""
    return f"{float(p):.6g}"


def _with_marginals(tags: list[str], marg: list[dict[str, float]], how: str, conllu: bool
                    ) -> tuple[list[str], list[Any] | None]:
    """(labels, extra fields) of one tagging in CRF++'s layouts: columns files take
    ``LABEL/p`` as the label (``crf_test -v1``) and, with ``how="all"`` (``-v2``), every
    label's ``LABEL/p`` cell after it, in the model's label order; CoNLL-U keeps the label
    and puts ``Prob=p`` (``all``: and ``Probs=LABEL/p,LABEL/p,…``) in MISC."""
    best = [_prob(m[t]) for t, m in zip(tags, marg, strict=True)]
    every = [[f"{k}/{_prob(p)}" for k, p in m.items()] for m in marg] if how == "all" else None
    if conllu:
        return tags, [f"Prob={b}" + (f"|Probs={','.join(c)}" if every else "")
                      for b, c in zip(best, every or best, strict=True)]
    labels = [f"{t}/{b}" for t, b in zip(tags, best, strict=True)]
    return labels, [tuple(c) for c in every] if every else None


SPEC = SequenceSpec()


class ChunkingSpec(SequenceSpec):
    """``--task chunking``: CoNLL-2000 style chunk tags; ``evaluate`` prints chunk F1."""

    name = "chunking"
    help = "chunking (BIO/IOB1/IOB2/BIOES), scored by chunk F1 as conlleval"
    estimator = "demidcd.estimators.sequence:ChunkTagger"
    unit = "chunk"  # what the report calls a chunk (chunk F1, entity F1)

    def estimator_params(self, options: DataOptions) -> dict[str, Any]:
        return {"label_scheme": options.label_scheme or "auto",
                "constraints": options.constraints}

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        """The sequence task's, and ``--label-scheme`` / ``--constraints`` set on ``est``."""
        options = super().configure(est, options)
        if options.label_scheme:
            est.label_scheme = options.label_scheme
        if options.constraints is not None:
            est.constraints = options.constraints
        return options

    def report(self, est, data, prefix: str = "") -> list[str]:
        X, Y = self.xy(data)
        m = est.metrics(X, Y)
        return format_report(m, prefix, self.unit) + partial_note(m, prefix, "sentences")

    def check_partial(self, data: Any, options: DataOptions) -> None:
        from ...errors import InputError
        from ...io.tagged import token_line
        from .decoding import scheme_transitions, training_scheme
        from .partial import (
            encode_partial,
            first_infeasible,
            infeasible_message,
            label_names,
            locate,
        )

        scheme = training_scheme(data.tags, options.label_scheme or "auto")
        if scheme is None:
            return
        labels = sorted(label_names(data.tags))
        ptr = np.zeros(len(data.tags) + 1, np.int64)
        np.cumsum([len(t) for t in data.tags], out=ptr[1:])
        _, ap, ai = encode_partial(data.tags, labels, int(ptr[-1]))
        q = first_infeasible(ptr, ap, ai, len(labels), scheme_transitions(labels, scheme))
        if q >= 0:
            s, t = locate(ptr, q)
            if data.raw is None and data.fmt == "conllu":  # (multiword lines: the raw ones)
                from ...io.tagged import read_tagged

                data = read_tagged(data.path, "conllu", data.label_column + 1,
                                   options.encoding, options.max_sentence_length)
            raise InputError(data.path, token_line(data, s, t),
                             infeasible_message(data.tags[s], t, scheme))


class NERSpec(ChunkingSpec):
    """``--task ner``: named-entity tags (CoNLL-2002/2003 style); ``evaluate`` prints entity F1."""

    name = "ner"
    help = "named entities (BIO/IOB1/IOB2/BIOES), scored by entity F1 as conlleval"
    estimator = "demidcd.estimators.sequence:NamedEntityTagger"
    unit = "entity"


CHUNKING = ChunkingSpec()
NER = NERSpec()
