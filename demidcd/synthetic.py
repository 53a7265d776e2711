"""A deterministic, seeded synthetic tagged corpus: a hidden Markov model with word orthography.

The generating process (all randomness from ``numpy.random.default_rng(seed)``, drawing only
uniform floats and integers, so output is identical across runs and platforms):

* **Tags.** ``n_tags`` tags named like Universal POS tags (NOUN, PUNCT, VERB, ADP, DET, ADJ, …;
  beyond 17, ``T17``, ``T18`` …) with target frequencies f_t ∝ (t+1)^-0.9.
* **Tag sequence.** First-order Markov chain: P(y_1 = t) ∝ f_t·g_t³ and
  P(y_j = t | y_{j-1} = s) ∝ f_t·g_{st}⁶ + ε with g ~ U(0,1): each tag has a few likely
  successors, so context disambiguates.
* **Sentence length.** A discretised gamma on 1..``max_length`` with shape 3 and mean
  ≈ ``mean_length``: P(L) ∝ L²·exp(−3L/mean_length).
* **Vocabulary.** ``vocab_size`` distinct words, each with one primary tag. Closed classes
  (DET, ADP, PRON, AUX, CCONJ, PART, SCONJ, INTJ) get a handful of short words; PUNCT/SYM get
  symbols; NUM gets digit strings; PROPN gets capitalised words; open classes (NOUN, VERB, ADJ,
  ADV, X, T17 …) get the rest, and a word of open tag t ends in one of t's three suffixes with
  probability ``suffix_prob`` (else another tag's suffix or none), so affix/shape features help.
* **Emission.** Within each tag, P(w | t) ∝ rank^-s (Zipf; s = 1.05 for open classes, 0.7 for
  closed ones) over a random ordering of the tag's own words; rare words of the test split are
  therefore often unseen in training.
* **Ambiguity.** A fraction ``ambiguity`` of the word types (chosen ∝ ½ uniform + ½ token
  frequency, among word-like tags) also gets a second tag t₂ (∝ f_t) with
  f_{t₂}·P(w | t₂) = ρ·f_{t₁}·P(w | t₁), ρ ~ U(0, 0.6); rows are then renormalised.

With the defaults (``generate_splits()``: 2000/500/500 sentences, ≈ 30k training tokens), the
most-frequent-tag-per-word baseline scores 84.3 % on the test split, 2.3 % of test tokens are
unseen in training, Viterbi with the true parameters scores 96.6 %, and a first-order averaged
perceptron with word/affix/shape/neighbour features 94.2 % (see ``tests/test_synthetic.py``).
Other seeds vary (baseline 84–90 %): the transition matrix is drawn too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from demidcd.io.tagged import TaggedCorpus, corpus_from_lists

__all__ = ["SyntheticModel", "generator_model", "generate", "generate_splits"]

_UPOS = [
    "NOUN", "PUNCT", "VERB", "ADP", "DET", "ADJ", "PROPN", "PRON", "ADV", "AUX",
    "CCONJ", "NUM", "PART", "SCONJ", "INTJ", "SYM", "X",
]
_ROLE = {
    "NOUN": "open", "VERB": "open", "ADJ": "open", "ADV": "open", "X": "open",
    "PROPN": "proper", "NUM": "number", "PUNCT": "punct", "SYM": "punct",
}
_OPEN_SHARE = {"NOUN": 0.42, "VERB": 0.24, "ADJ": 0.14, "PROPN": 0.1, "ADV": 0.05, "X": 0.02}
_SUFFIXES = [
    "ion", "ness", "ment", "er", "ity", "ed", "ing", "ize", "ate", "en", "ous", "ful", "ive",
    "al", "able", "ly", "ward", "ist", "ism", "ery", "ish", "less", "ify", "ance", "ent", "ic",
    "ory", "ure", "age", "dom", "hood", "ship", "ant", "ile", "oid", "ular", "esque", "eth",
    "ix", "um", "oth", "ane", "ock", "ump", "ast", "irk", "olt", "und", "ash", "ev", "oz",
]
_PROPER_ENDINGS = ["ton", "ville", "son", "ia", "berg", "ford", "ez", "ov", "stein", "ini"]
_PUNCT = [
    ",", ".", ":", ";", "!", "?", "-", "(", ")", '"', "'", "...", "/", "--", "&", "%", "$",
    "#", "*", "+", "=", "@", "[", "]", "{", "}", "<", ">", "|", "~",
]
_CONS = "bcdfghjklmnprstvwz"
_S_OPEN, _S_CLOSED = 1.05, 0.7  # Zipf exponents of P(w | t)
_AMB_UNIFORM = 0.5  # ambiguous words: mix of uniform and token-frequency choice
_AMB_RATIO_MAX = 0.6  # ambiguous words: second-tag use up to this times the first
_TRANS_POW = 6.0  # P(t | s) ∝ f_t·g^_TRANS_POW + ε: larger = more predictable tag sequences
_VOWELS = "aeiou"


@dataclass
class SyntheticModel:
    """True generating parameters: P(y_1) = start, P(y_j | y_{j-1}) = trans, P(w | t) = emit."""

    tags: list[str]  # tag names, index t
    words: list[str]  # vocabulary, index w
    start: np.ndarray  # float64[T]
    trans: np.ndarray  # float64[T, T], rows sum to 1
    emit: np.ndarray  # float64[T, V], rows sum to 1
    length_p: np.ndarray  # float64[max_length + 1], P(L), L = 0 has probability 0


def _tag_names(n_tags: int) -> list[str]:
    return [_UPOS[t] if t < len(_UPOS) else f"T{t}" for t in range(n_tags)]


def _role(name: str) -> str:
    if name.startswith("T") and name[1:].isdigit():
        return "open"
    return _ROLE.get(name, "closed")


def _normalise(m: np.ndarray) -> np.ndarray:
    return m / m.sum(axis=-1, keepdims=True)


def _stem(rng: np.random.Generator, n_syl: int) -> str:
    c = rng.integers(0, len(_CONS), n_syl)
    v = rng.integers(0, len(_VOWELS), n_syl)
    return "".join(_CONS[a] + _VOWELS[b] for a, b in zip(c, v, strict=True))


def generator_model(
    n_tags: int = 12,
    vocab_size: int = 3000,
    ambiguity: float = 0.3,
    mean_length: float = 15,
    max_length: int = 60,
    seed: int = 0,
    suffix_prob: float = 0.75,
) -> SyntheticModel:
    """Draw the HMM parameters and vocabulary used by :func:`generate` (see module docstring)."""
    if not 2 <= n_tags <= 1000:
        raise ValueError(f"n_tags must be in 2..1000, got {n_tags}")
    if vocab_size < 4 * n_tags:
        raise ValueError(f"vocab_size must be >= 4 * n_tags = {4 * n_tags}, got {vocab_size}")
    if not 0.0 <= ambiguity <= 1.0:
        raise ValueError(f"ambiguity must be in [0, 1], got {ambiguity}")
    if not 1 <= mean_length <= max_length:
        raise ValueError(f"need 1 <= mean_length <= max_length, got {mean_length}, {max_length}")
    if not 0.0 <= suffix_prob <= 1.0:
        raise ValueError(f"suffix_prob must be in [0, 1], got {suffix_prob}")
    rng = np.random.default_rng(seed)
    T, V = n_tags, vocab_size
    names = _tag_names(T)
    roles = [_role(n) for n in names]
    freq = 1.0 / np.arange(1, T + 1) ** 0.9

    start = _normalise(freq * rng.random(T) ** 3 + 1e-3)
    trans = _normalise(freq[None, :] * rng.random((T, T)) ** _TRANS_POW + 2e-3)

    # --- how many words per tag
    n_words = np.zeros(T, np.int64)
    small = max(3, min(20, V // (8 * T)))
    for t, r in enumerate(roles):
        if r == "closed":
            n_words[t] = small
        elif r == "punct":
            n_words[t] = min(small + 4, len(_PUNCT))
        elif r == "number":
            n_words[t] = max(3, V // 25)
    open_tags = [t for t, r in enumerate(roles) if r in ("open", "proper")]
    rest = V - int(n_words.sum())
    if not open_tags:  # tiny tag sets: the most frequent tag is open
        open_tags = [0]
        rest += int(n_words[0])
        n_words[0] = 0
        roles[0] = "open"
    share = np.array([_OPEN_SHARE.get(names[t], 0.03) for t in open_tags])
    alloc = np.floor(rest * share / share.sum()).astype(np.int64)
    alloc[0] += rest - alloc.sum()
    n_words[open_tags] = alloc
    assert int(n_words.sum()) == V and (n_words >= 1).all()

    # --- word strings with tag-dependent orthography
    sfx_perm = rng.permutation(len(_SUFFIXES))
    suffixes = {t: [_SUFFIXES[sfx_perm[(3 * k + j) % len(_SUFFIXES)]] for j in range(3)]
                for k, t in enumerate(open_tags)}
    all_sfx = [s for t in open_tags for s in suffixes[t]]
    words: list[str] = []
    primary = np.repeat(np.arange(T), n_words)
    seen: set[str] = set()
    punct_pool = list(_PUNCT)
    for t in primary:
        r = roles[t]
        for attempt in range(1000):
            if r == "punct" and punct_pool:
                w = punct_pool.pop(0)
            elif r == "punct":
                w = _PUNCT[rng.integers(len(_PUNCT))] + _PUNCT[rng.integers(len(_PUNCT))]
            elif r == "number":
                kind = rng.integers(4)
                n = int(rng.integers(0, 10 ** int(rng.integers(1, 5))))
                if kind == 0:
                    w = str(n)
                elif kind == 1:
                    w = f"{n}.{int(rng.integers(0, 100))}"
                elif kind == 2:
                    w = f"{n},{int(rng.integers(0, 1000)):03d}"
                else:
                    w = str(1900 + int(rng.integers(0, 130)))
            elif r == "closed":
                w = _stem(rng, 1 + int(rng.integers(0, 2)))[: 2 + int(rng.integers(0, 3))]
            else:
                stem = _stem(rng, 1 + int(rng.integers(0, 3)))
                u = rng.random()
                if u < suffix_prob:
                    sfx = suffixes[t][int(rng.integers(3))]
                elif u < suffix_prob + (1 - suffix_prob) / 2:
                    sfx = all_sfx[int(rng.integers(len(all_sfx)))]
                else:
                    sfx = ""
                if r == "proper":
                    sfx = _PROPER_ENDINGS[int(rng.integers(len(_PROPER_ENDINGS)))] if (
                        u < suffix_prob / 2) else sfx
                    w = (stem + sfx).capitalize()
                else:
                    w = stem + sfx
            if attempt > 50:
                w = f"{w}{attempt}"
            if w not in seen:
                break
        seen.add(w)
        words.append(w)

    # --- emissions: Zipf over a random ranking of each tag's own words
    emit = np.zeros((T, V))
    for t in range(T):
        own = np.flatnonzero(primary == t)[rng.permutation(n_words[t])]
        s = _S_CLOSED if roles[t] in ("closed", "punct") else _S_OPEN
        emit[t, own] = 1.0 / np.arange(1, own.shape[0] + 1) ** s
    emit = _normalise(emit)

    # --- ambiguous words: a second tag t2 with P(w | t2)·f_t2 = ρ·P(w | t1)·f_t1, ρ ~ U(0, 1),
    # so the second use is up to as frequent as the first; words chosen ∝ a mix of uniform and
    # token frequency (frequent words are more often ambiguous, as in natural language)
    wordlike = np.array([r not in ("punct", "number") for r in roles])
    n_amb = int(round(ambiguity * V))
    if n_amb and wordlike.sum() >= 2:
        tokfreq = (freq[:, None] * emit).sum(axis=0)
        tokfreq /= tokfreq.sum()
        pick = np.where(wordlike[primary], _AMB_UNIFORM / V + (1 - _AMB_UNIFORM) * tokfreq, 0.0)
        amb = _draw_without_replacement(rng, pick, min(n_amb, int(np.count_nonzero(pick))))
        p2 = np.where(wordlike, freq, 0.0)
        cum2 = _cum(p2 / p2.sum())
        extra = np.zeros((T, V))
        for w in amb:
            t1 = int(primary[w])
            t2 = t1
            for _ in range(20):
                t2 = int(np.searchsorted(cum2, rng.random(), side="right"))
                if t2 != t1:
                    break
            rho = _AMB_RATIO_MAX * rng.random()
            if t2 != t1:
                extra[t2, w] = min(0.3, rho * emit[t1, w] * freq[t1] / freq[t2])
        emit = _normalise(emit + extra)

    L = np.arange(max_length + 1, dtype=np.float64)
    length_p = L**2 * np.exp(-3.0 * L / float(mean_length))
    length_p[0] = 0.0
    length_p /= length_p.sum()
    return SyntheticModel(names, words, start, trans, emit, length_p)


def _draw_without_replacement(rng: np.random.Generator, p: np.ndarray, k: int) -> np.ndarray:
    """k distinct indices, sequentially ∝ p (Efraimidis–Spirakis keys u^(1/p), top k)."""
    keys = np.full(p.shape[0], -np.inf)
    nz = p > 0
    keys[nz] = np.log(rng.random(int(nz.sum()))) / p[nz]
    return np.sort(np.argsort(-keys, kind="stable")[:k])


def _cum(p: np.ndarray) -> np.ndarray:
    c = np.cumsum(p, axis=-1)
    c[..., -1] = 1.0
    return c


def sample(model: SyntheticModel, n_sentences: int, seed: int) -> TaggedCorpus:
    """Draw ``n_sentences`` (words, tags) sequences from ``model``."""
    if n_sentences < 1:
        raise ValueError(f"n_sentences must be >= 1, got {n_sentences}")
    rng = np.random.default_rng([seed, 1])
    lengths = np.searchsorted(_cum(model.length_p), rng.random(n_sentences), side="right")
    lengths = np.maximum(lengths, 1)
    n, Lmax = n_sentences, int(lengths.max())
    u = rng.random((n, Lmax))
    z = np.empty((n, Lmax), np.int64)
    z[:, 0] = np.searchsorted(_cum(model.start), u[:, 0], side="right")
    ctrans = _cum(model.trans)
    for j in range(1, Lmax):
        z[:, j] = (ctrans[z[:, j - 1]] < u[:, j, None]).sum(axis=1)
    u = rng.random((n, Lmax))
    x = np.empty((n, Lmax), np.int64)
    cemit = _cum(model.emit)
    for t in range(len(model.tags)):
        m = z == t
        x[m] = np.searchsorted(cemit[t], u[m], side="right")
    x = np.minimum(x, len(model.words) - 1)
    W, N = model.words, model.tags
    tokens = [[W[i] for i in x[s, : lengths[s]]] for s in range(n)]
    tags = [[N[i] for i in z[s, : lengths[s]]] for s in range(n)]
    return corpus_from_lists(tokens, tags)


def generate(n_sentences: int = 2000, **model: Any) -> TaggedCorpus:
    """``n_sentences`` sentences of the seeded HMM corpus described in the module docstring;
    ``model``: the keyword arguments of :func:`generator_model` (n_tags, vocab_size, ambiguity,
    mean_length, max_length, seed, suffix_prob)."""
    return sample(generator_model(**model), n_sentences, model.get("seed", 0))


def _subset(c: TaggedCorpus, a: int, b: int) -> TaggedCorpus:
    return corpus_from_lists(c.tokens[a:b], c.tags[a:b])


def generate_splits(
    seed: int = 0,
    n_train: int | None = None,
    n_dev: int | None = None,
    n_test: int | None = None,
    n_sentences: int | None = None,
    **kw: float,
) -> tuple[TaggedCorpus, TaggedCorpus, TaggedCorpus]:
    """Train/dev/test corpora drawn from one model: the first ``n_train`` sentences of
    ``generate(n_train + n_dev + n_test, seed=seed, **kw)``, then ``n_dev``, then ``n_test``.

    ``n_train`` defaults to ``n_sentences`` (an alias, as in ``demidcd generate --sentences``)
    or 2000; ``n_dev`` and ``n_test`` default to ``n_train // 4`` (500 each by default).
    """
    if n_train is None:
        n_train = 2000 if n_sentences is None else n_sentences
    elif n_sentences is not None and n_sentences != n_train:
        raise ValueError("give n_train or n_sentences, not both")
    n_dev = max(1, n_train // 4) if n_dev is None else n_dev
    n_test = max(1, n_train // 4) if n_test is None else n_test
    if min(n_train, n_dev, n_test) < 1:
        raise ValueError("n_train, n_dev and n_test must be >= 1")
    c = generate(n_sentences=n_train + n_dev + n_test, seed=seed, **kw)  # type: ignore[arg-type]
    return (_subset(c, 0, n_train), _subset(c, n_train, n_train + n_dev),
            _subset(c, n_train + n_dev, n_train + n_dev + n_test))
