"""What a fitted sequence tagger's weights say: ``demidcd dump``'s lines, sklearn-crfsuite's
``state_features_`` / ``transition_features_`` and the one-line feature summary (a mixin of
:class:`~demidcd.estimators.sequence.SequenceTagger`, which provides ``coef_``, ``classes_``,
``featurizer_``, ``n_features_``, ``seen_pairs_`` and ``_u_size``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..tasks.chain.template import DictFeaturizer, TemplateFeaturizer
from .base import top_text, top_weights


def _escape(name: str) -> str:
    """A feature or label name on one dump line: tab, newline and backslash escaped."""
    if "\\" in name or "\t" in name or "\n" in name or "\r" in name:
        return name.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n") \
            .replace("\r", "\\r")
    return name


class WeightInspection:
    """The weight-reading methods of a sequence tagger."""

    def feature_summary(self) -> str:
        n_tags = len(self.classes_)
        dim = self.coef_.shape[0]
        g = getattr(self, "n_bfeatures_", 0)
        bigram = f" + {g:,} label-bigram features x {n_tags}^2" if g else ""
        pairs = getattr(self, "seen_pairs_", None)
        emissions = f"{self.n_features_:,} observation features x {n_tags} tags" \
            if pairs is None else (f"{pairs[1].shape[0]:,} (feature, tag) pairs seen in "
                                   f"training (of {self.n_features_:,} x {n_tags})")
        return (f"{emissions} + transitions{bigram} = {dim:,} weights "
                f"({dim * 8 / 2**20:.1f} MiB float64)")

    def _feature_source(self) -> str:
        f = self.featurizer_
        if isinstance(f, TemplateFeaturizer):
            return f"template {f.template.path}"
        if isinstance(f, DictFeaturizer):
            return "feature dicts"
        return f"built-in template {f.template!r}"

    def weight_lines(self, top: int | None = 50) -> Iterator[str]:
        """The lines of ``demidcd dump``, as ``crf_learn -t``'s text model or ``wapiti dump``:
        the ``top`` feature weights by |weight| (None: every non-zero one), one
        ``feature<TAB>label<TAB>weight`` line each (a B feature's label is ``prev->label``),
        then the label transitions likewise (``BOS`` / ``EOS``: the sentence's start / end).
        Hashed features are named by bucket (``bucket 123``, ``B bucket 7``)."""
        self._check_fitted()
        w = self.coef_
        F, K, G = self.n_features_, len(self.classes_), getattr(self, "n_bfeatures_", 0)
        tb, bb = self._u_size(), self._u_size() + (K + 1) ** 2
        pairs = getattr(self, "seen_pairs_", None)
        nu = tb if pairs is None else pairs[1].shape[0]  # U weights (without the padding)
        names = self.featurizer_.features
        bnames = getattr(self.featurizer_, "bfeatures", None)
        labels = [_escape(t) for t in self.classes_]
        feats = np.concatenate([w[:nu], w[bb:]])
        idx = top_weights(feats, top)
        yield (f"# {self.task_name} model: {K} labels, {F:,} features"
               + (f" and {G:,} label-bigram features" if G else "")
               + f" ({self._feature_source()}{', hashed' if names is None else ''}), "
               f"{w.shape[0]:,} weights")
        yield (f"# {top_text(top, idx.shape[0])} of the features by |weight| (of "
               f"{np.count_nonzero(feats):,} non-zero): feature, label (prev->label for "
               "label-bigram features), weight")
        for i in idx.tolist():
            if i < nu:
                if pairs is None:
                    f, k = divmod(i, K)
                else:
                    f, k = int(np.searchsorted(pairs[0], i, "right")) - 1, int(pairs[1][i])
                name = _escape(names[f]) if names is not None else f"bucket {f}"
                yield f"{name}\t{labels[k]}\t{feats[i]:+.6g}"
            else:
                g, r = divmod(i - nu, K * K)
                a, b = divmod(r, K)
                name = _escape(bnames[g]) if bnames is not None else f"B bucket {g}"
                yield f"{name}\t{labels[a]}->{labels[b]}\t{feats[i]:+.6g}"
        trans = w[tb:bb].copy()
        trans[-1] = 0.0  # START -> END: no sentence is empty
        tidx = top_weights(trans, top)
        ends = [*labels, "BOS"], [*labels, "EOS"]
        yield (f"# {top_text(top, tidx.shape[0])} of the {(K + 1) ** 2 - 1:,} label "
               "transitions by |weight|: previous label -> label (BOS: the sentence start, "
               "EOS: its end), weight")
        for i in tidx.tolist():
            a, b = divmod(i, K + 1)
            yield f"{ends[0][a]}->{ends[1][b]}\t{trans[i]:+.6g}"

    @property
    def state_features_(self) -> dict[tuple[str, str], float]:
        """{(feature, label): weight} for every non-zero observation-feature weight, as
        sklearn-crfsuite's ``state_features_`` (``Counter(tagger.state_features_)
        .most_common(20)`` as in its tutorial); hashed features are named ``bucket F``."""
        self._check_fitted()
        F, K = self.n_features_, len(self.classes_)
        pairs = getattr(self, "seen_pairs_", None)
        if pairs is None:
            U = self.coef_[:F * K].reshape(F, K)
            fs, ks = np.nonzero(U)
            ws = U[fs, ks]
        else:  # seen pairs: weight j belongs to (the feature whose list holds j, lab[j])
            j = np.flatnonzero(self.coef_[:pairs[1].shape[0]])
            fs = np.searchsorted(pairs[0], j, "right") - 1
            ks, ws = pairs[1][j], self.coef_[j]
        names = self.featurizer_.features
        return {(names[f] if names is not None else f"bucket {f}", self.classes_[k]):
                float(v) for f, k, v in zip(fs.tolist(), ks.tolist(), ws.tolist(), strict=True)}

    @property
    def transition_features_(self) -> dict[tuple[str, str], float]:
        """{(previous label, label): weight} of the label transitions T, as sklearn-crfsuite's
        ``transition_features_`` (the sentence start and end, which CRFsuite does not have,
        are in :meth:`weight_lines`)."""
        self._check_fitted()
        K, tb = len(self.classes_), self._u_size()
        T = self.coef_[tb:tb + (K + 1) ** 2].reshape(K + 1, K + 1)
        return {(a, b): float(T[i, j]) for i, a in enumerate(self.classes_)
                for j, b in enumerate(self.classes_)}
