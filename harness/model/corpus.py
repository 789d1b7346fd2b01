"""A deterministic synthetic corpus for the perplexity fixture (no third-party text).

A small probabilistic grammar over a 512-token vocabulary, with structure a transformer
must use context for:

* each document has a latent **topic** (16) that skews every content word (nouns,
  verbs, adjectives, adverbs) towards its own Zipf ranking: inferring the topic from
  earlier words lowers the entropy of later ones;
* each document introduces a **cast** of three names (``<doc> A , B and C :``) that
  sentences refer back to (recency-weighted) and that a closing recap repeats in order
  (``end : A B C .``): copying across the whole document;
* subject-verb **number agreement** across a parenthesised relative clause and across
  coordinated verb phrases;
* sentences are **numbered** (``§0``, ``§1``, ...): counting within the document.

Determinism: random bits come from NumPy's PCG64 ``random_raw`` (a stable stream) seeded
through ``SeedSequence``; every choice is an integer draw against integer weights (no
floating point decides a token), so the same (split, seed, length) gives the same tokens
on any machine. The log-probability the grammar assigned to each token (its choices,
joint with the latent topic) is returned too: ``generator_ppl`` is the perplexity of the
text under its own grammar, a floor a perfect model approaches (within log(16) nats per
document for not knowing the topic).
"""

from __future__ import annotations

import math
import multiprocessing
from bisect import bisect_right
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

CORPUS_VERSION = 1
VOCAB_SIZE = 512
N_TOPICS = 16

# Token layout (ranges are [start, start + count)).
PAD, DOC, DOT, COMMA, LPAREN, RPAREN, COLON, AND, THAT, BECAUSE, THEN, END = range(12)
_SPECIAL_WORDS = ("<pad>", "<doc>", ".", ",", "(", ")", ":", "and", "that", "because",
                  "then", "end")
COUNTER0, N_COUNTERS = 12, 16
DET_SG0, DET_PL0, N_DETS = 28, 36, 8
NAME0, N_NAMES = 44, 64
ADJ0, N_ADJS = 108, 64
ADV0, N_ADVS = 172, 36
NOUN_SG0, NOUN_PL0, N_NOUNS = 208, 304, 96
VERB_SG0, VERB_PL0, N_VERBS = 400, 456, 56
assert VERB_PL0 + N_VERBS == VOCAB_SIZE

_SPLIT_STREAMS = {"train": 1, "heldout": 2}
_ZIPF_C = 720720  # lcm(1..16): integer Zipf weights C // rank


@dataclass(frozen=True)
class CorpusText:
    """Tokens and the grammar's own log-probability of each (natural log)."""

    tokens: np.ndarray   # int32 [n]
    logp: np.ndarray     # float64 [n]
    split: str
    seed: int

    def generator_ppl(self, start: int = 1, stop: int | None = None) -> float:
        """exp(mean NLL) of tokens[start:stop] under the grammar (token 0 is never predicted)."""
        seg = self.logp[start:stop]
        return math.exp(-float(seg.mean()))


class _Table:
    """A categorical distribution with integer weights, sampled exactly."""

    def __init__(self, weights: list[int]) -> None:
        if not weights or min(weights) <= 0:
            raise ValueError("weights must be positive")
        self.cum = list(accumulate(weights))
        self.total = self.cum[-1]
        self.logp = [math.log(w / self.total) for w in weights]


class _Draws:
    """64-bit raw draws from PCG64, consumed one at a time as Python ints."""

    def __init__(self, entropy: list[int]) -> None:
        self._bitgen = np.random.PCG64(np.random.SeedSequence(entropy))
        self._buf: list[int] = []
        self._i = 0

    def next(self) -> int:
        if self._i == len(self._buf):
            self._buf = self._bitgen.random_raw(1 << 15).tolist()
            self._i = 0
        self._i += 1
        return self._buf[self._i - 1]


def _permutation(n: int, draws: _Draws) -> list[int]:
    """Fisher-Yates with integer draws (deterministic)."""
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = draws.next() % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def _topic_tables(n: int, draws: _Draws) -> list[_Table]:
    """Per topic: 3 x (its own Zipf ranking) + 1 x (a global Zipf ranking)."""
    glob = _permutation(n, draws)
    tables = []
    for _ in range(N_TOPICS):
        own = _permutation(n, draws)
        w = [3 * (_ZIPF_C // (own[i] + 1)) + _ZIPF_C // (glob[i] + 1) for i in range(n)]
        tables.append(_Table(w))
    return tables


class _Grammar:
    """The grammar's fixed distributions (shared by every split; seeded by ``seed``)."""

    def __init__(self, seed: int) -> None:
        draws = _Draws([CORPUS_VERSION, 0, seed])
        self.nouns = _topic_tables(N_NOUNS, draws)
        self.verbs = _topic_tables(N_VERBS, draws)
        self.adjs = _topic_tables(N_ADJS, draws)
        self.advs = _topic_tables(N_ADVS, draws)
        self.dets = _Table([_ZIPF_C // (r + 1) for r in _permutation(N_DETS, draws)])
        self.template = _Table([4, 2, 2, 2])
        self.recency = _Table([4, 2, 1])


class _Writer:
    """Emits tokens, attaching to each the log-probability of the choices that led to it."""

    def __init__(self, draws: _Draws) -> None:
        self.draws = draws
        self.tokens: list[int] = []
        self.logp: list[float] = []
        self._pending = 0.0

    def choose(self, table: _Table) -> int:
        i = bisect_right(table.cum, self.draws.next() % table.total)
        self._pending += table.logp[i]
        return i

    def coin(self, num: int, den: int) -> bool:
        hit = self.draws.next() % den < num
        self._pending += math.log((num if hit else den - num) / den)
        return hit

    def uniform(self, n: int) -> int:
        self._pending += -math.log(n)
        return self.draws.next() % n

    def emit(self, *tokens: int) -> None:
        for t in tokens:
            self.tokens.append(t)
            self.logp.append(self._pending)
            self._pending = 0.0


def _document(w: _Writer, g: _Grammar) -> None:
    topic = w.uniform(N_TOPICS)
    pool = list(range(N_NAMES))
    cast = []
    for k in range(3):
        cast.append(pool.pop(w.uniform(N_NAMES - k)))
    w.emit(DOC, NAME0 + cast[0], COMMA, NAME0 + cast[1], AND, NAME0 + cast[2], COLON)
    recent = list(cast)  # most recently mentioned first

    def name() -> int:
        who = recent.pop(w.choose(g.recency))
        recent.insert(0, who)
        return NAME0 + who

    def noun_phrase(plural: bool) -> None:
        w.emit((DET_PL0 if plural else DET_SG0) + w.choose(g.dets))
        if w.coin(1, 2):
            w.emit(ADJ0 + w.choose(g.adjs[topic]))
        lemma = w.choose(g.nouns[topic])
        w.emit((NOUN_PL0 if plural else NOUN_SG0) + lemma)

    def subject() -> bool:
        if w.coin(3, 10):
            w.emit(name())
            return False
        plural = w.coin(1, 2)
        noun_phrase(plural)
        return plural

    def verb_phrase(plural: bool) -> None:
        lemma = w.choose(g.verbs[topic])
        w.emit((VERB_PL0 if plural else VERB_SG0) + lemma)
        if w.coin(7, 10):
            if w.coin(2, 10):
                w.emit(name())
            else:
                noun_phrase(w.coin(1, 2))
        if w.coin(3, 10):
            w.emit(ADV0 + w.choose(g.advs[topic]))

    n_sentences = 4 + w.uniform(13)
    for i in range(n_sentences):
        w.emit(COUNTER0 + i % N_COUNTERS)
        kind = w.choose(g.template)
        if kind == 3:
            w.emit(THEN)
        plural = subject()
        if kind == 2:
            w.emit(LPAREN, THAT)
            verb_phrase(plural)
            w.emit(RPAREN)
        verb_phrase(plural)
        if kind == 1:
            w.emit(COMMA, BECAUSE)
            verb_phrase(subject())
        elif kind == 3:
            w.emit(AND)
            verb_phrase(plural)
        w.emit(DOT)
    w.emit(END, COLON, NAME0 + cast[0], NAME0 + cast[1], NAME0 + cast[2], DOT)


def generate(n_tokens: int, split: str = "train", seed: int = 0, shard: int = 0) -> CorpusText:
    """The first ``n_tokens`` tokens of ``split`` ("train" or "heldout"), starting at ``<doc>``.

    The splits (and the shards of a split) use independent random streams over the same
    grammar, so held-out documents are new samples, not copies of training text.
    """
    if split not in _SPLIT_STREAMS:
        raise ValueError(f"split must be one of {', '.join(_SPLIT_STREAMS)}, got {split!r}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens <= 0:
        raise ValueError(f"n_tokens must be a positive int, got {n_tokens!r}")
    grammar = _Grammar(seed)
    if isinstance(shard, bool) or not isinstance(shard, int) or shard < 0:
        raise ValueError(f"shard must be a non-negative int, got {shard!r}")
    writer = _Writer(_Draws([CORPUS_VERSION, _SPLIT_STREAMS[split], seed, shard]))
    while len(writer.tokens) < n_tokens:
        _document(writer, grammar)
    return CorpusText(np.asarray(writer.tokens[:n_tokens], dtype=np.int32),
                      np.asarray(writer.logp[:n_tokens], dtype=np.float64), split, seed)


def _shard_tokens(args: tuple[int, str, int, int]) -> np.ndarray:
    n, split, seed, shard = args
    return generate(n, split, seed, shard).tokens


def sharded_tokens(n_tokens: int, split: str = "train", seed: int = 0,
                   shard_tokens: int = 1 << 20, workers: int = 1) -> np.ndarray:
    """``n_tokens`` tokens made of independent shards of ``shard_tokens`` (shard 0, 1, ...).

    The result depends only on the arguments other than ``workers`` (a process pool only
    speeds it up), so a training corpus is the same on a laptop and on a GPU host.
    """
    if isinstance(shard_tokens, bool) or not isinstance(shard_tokens, int) or shard_tokens <= 0:
        raise ValueError(f"shard_tokens must be a positive int, got {shard_tokens!r}")
    jobs = []
    left, shard = n_tokens, 0
    while left > 0:
        jobs.append((min(left, shard_tokens), split, seed, shard))
        left -= shard_tokens
        shard += 1
    if workers > 1 and len(jobs) > 1:
        # spawn, not fork: the caller may already hold CUDA or OpenMP state
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
            parts = list(pool.map(_shard_tokens, jobs))
    else:
        parts = [_shard_tokens(j) for j in jobs]
    return np.concatenate(parts)


def _syllable_word(i: int, n_syll: int) -> str:
    cons, vows = "bdfgklmnprstvz", "aeiou"
    out = []
    for _ in range(n_syll):
        out.append(cons[i % len(cons)] + vows[(i // len(cons)) % len(vows)])
        i = i // (len(cons) * len(vows)) + 7 * (i % 3) + 1
    return "".join(out)


def token_word(t: int) -> str:
    """A readable spelling of token ``t`` (for docs and debugging only)."""
    if not 0 <= t < VOCAB_SIZE:
        raise ValueError(f"token {t} is outside the vocabulary 0..{VOCAB_SIZE - 1}")
    if t < COUNTER0:
        return _SPECIAL_WORDS[t]
    if t < DET_SG0:
        return f"§{t - COUNTER0}"
    if t < NAME0:
        return ("the", "a", "this", "every", "one", "that", "each", "any",
                "the", "some", "these", "many", "all", "those", "few", "both")[t - DET_SG0]
    if t < ADJ0:
        return _syllable_word(t - NAME0 + 300, 2).capitalize()
    if t < ADV0:
        return _syllable_word(t - ADJ0 + 500, 2) + "ic"
    if t < NOUN_SG0:
        return _syllable_word(t - ADV0 + 700, 2) + "ly"
    if t < VERB_SG0:
        lemma = (t - NOUN_SG0) % N_NOUNS
        return _syllable_word(lemma + 900, 2) + ("s" if t >= NOUN_PL0 else "")
    lemma = (t - VERB_SG0) % N_VERBS
    return _syllable_word(lemma + 1200, 2) + ("es" if t < VERB_PL0 else "")


def detokenize(tokens) -> str:
    """Space-joined readable words of a token sequence."""
    return " ".join(token_word(int(t)) for t in tokens)
