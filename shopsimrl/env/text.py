"""Text normalization shared by search, instructions and the reward.

One normalizer everywhere means a query token, an index token and a reward term
are compared in the same form (NFKC, casefolded, punctuation turned into
spaces), the same way SQLite's ``unicode61`` tokenizer splits the index.
"""

from __future__ import annotations

import re
import unicodedata

from shopsimrl.env.vocab import STOP_WORDS

# Money expressions ("$30-40", "$40.00", "40 dollars", "usd 40") are dropped from
# queries whole: prices are not searchable text, and a bare "40" left behind
# would match option values such as "40lb".
_MONEY = re.compile(
    r"(?:us\s*)?\$\s*\d+(?:[.,]\d+)?(?:\s*(?:-|–|—|to)\s*\$?\s*\d+(?:[.,]\d+)?)?"
    r"|\b\d+(?:[.,]\d+)?\s*(?:-|–|to)?\s*\d*(?:[.,]\d+)?\s*(?:dollars?|usd|bucks)\b"
    r"|\b(?:usd|eur|gbp)\s*\d+(?:[.,]\d+)?"
)
_NON_WORD = re.compile(r"[\W_]+")


def fold(text: str) -> str:
    """NFKC + casefold + every run of punctuation or space collapsed to one space."""
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def tokens(text: str) -> list[str]:
    return fold(text).split()


def terms(text: str) -> set[str]:
    """Content words of ``text``: folded tokens minus stop words (for title overlap)."""
    return {t for t in tokens(text) if t not in STOP_WORDS}


def query_tokens(query: str, *, max_tokens: int = 32) -> list[str]:
    """The search tokens of a free-text query: money removed, stop words removed, deduplicated."""
    text = unicodedata.normalize("NFKC", query).casefold()
    text = _MONEY.sub(" ", text)
    out: list[str] = []
    seen: set[str] = set()
    for tok in _NON_WORD.sub(" ", text).split():
        if tok in STOP_WORDS or tok in seen:
            continue
        seen.add(tok)
        out.append(tok)
        if len(out) >= max_tokens:
            break
    return out


def normalize_query(query: str) -> str:
    """The cache key of a query: its search tokens joined by spaces."""
    return " ".join(query_tokens(query))


def contains_phrase(haystack_folded: str, phrase: str) -> bool:
    """Whole-word phrase test on folded text ("raw" is not found in "drawer")."""
    needle = fold(phrase)
    if not needle:
        return False
    return f" {needle} " in f" {haystack_folded} "
