"""Do two belief texts state different facts? Rules that a cosine similarity cannot see.

An embedding puts "TSMC Q2 capacity is fully booked" and "TSMC Q3 capacity is fully booked"
close together: they share every word but one. Folding the second belief into the first would
lose a fact, so a belief is folded into a similar one only when :func:`facts_disagree` is
false. The rules are conservative in the direction that keeps beliefs: when in doubt they say
"disagree", and the cost is a near-duplicate kept as its own entry.

:func:`disagreement` names the first rule that fires (or None):

* ``"number"``: the numbers differ (digits or number words, decimals, percentages, ordinals,
  quarters like Q2, versions like v1.2, times like 9am or 2:30; ``5,000`` is ``5000`` and
  ``two`` is ``2``), or both texts name units (seconds, minutes, MB, ``%``...) and the units
  differ (``100 req/min`` vs ``100 req/sec``).
* ``"date"``: both texts name months, weekdays, times of day or seasons, and these differ.
* ``"quantity"``: quantifiers differ (``most`` vs ``few``, ``every other``, ``half`` vs
  ``full``...), or both texts bound a number and the bounds differ (``at least`` vs
  ``at most``).
* ``"negation"``: one text is negated (``not``, ``no``, ``never``, ``n't``, ``without``...)
  and the other is not, or one uses a word the other negates by a prefix (``unauthenticated``
  vs ``authenticated``), or the texts use opposite words (``before``/``after``,
  ``open``/``closed``...).
* ``"order"``: the same content words in an order that is not a mere fronting of a phrase
  ("X differs from Y" vs "Y differs from X"; "Every Monday, invoices are sent" vs "Invoices
  are sent every Monday" is fine).
* ``"scope"``: one text is the other plus a qualifying phrase that starts with a preposition
  ("The conversion rate is 3.2%" vs "The conversion rate is 3.2% on mobile"): the narrower
  fact would replace the general one. An added adverb ("currently") or clause ("when it goes
  down") is not a new scope.
* ``"entity"``: each text names a proper noun (capitalised in mid-sentence, or all capitals)
  that the other does not mention (``App Store`` vs ``Play Store``).

The rules read English; on other languages only the number rules and the order rule apply.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

__all__ = ["Disagreement", "disagreement", "facts_disagree"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


Disagreement = Literal["number", "date", "quantity", "negation", "order", "entity", "scope"]

_TOKEN = re.compile(r"[$€£#]?[\w%]+(?:['.,:][\w%]+)*")
_SENTENCE_END = re.compile(r"[.!?:;]\s*$")
_HAS_DIGIT = re.compile(r"\d")
_GROUPED = re.compile(r"(?<=\d),(?=\d{3}\b)")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_WHOLE_HOUR = re.compile(r"^(\d{1,2}):00$")

_STOP = _words(
    """
    a an the this that these those it its it's is are was were be been being am do does did has
    have had having will would shall should can could may might must to of in on at by for with
    from into onto over under as than then so and or but if when while where which who whom
    whose what how why there here about per via up out off also just very too own same i me my
    we our us you your he him his she her they them their every each get gets got getting use
    uses used using
    """
)
_NUMBER_WORDS = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "thirteen": "13",
    "fourteen": "14",
    "fifteen": "15",
    "sixteen": "16",
    "seventeen": "17",
    "eighteen": "18",
    "nineteen": "19",
    "twenty": "20",
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
    "thousand": "1000",
    "million": "1000000",
    "billion": "1000000000",
    "dozen": "12",
    "first": "1",
    "third": "3",
    "fourth": "4",
    "fifth": "5",
    "sixth": "6",
    "seventh": "7",
    "eighth": "8",
    "ninth": "9",
    "tenth": "10",
    "twice": "2",
    "once": "1",
}
_UNITS = {
    **dict.fromkeys(["ms", "millisecond", "milliseconds"], "ms"),
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], "s"),
    **dict.fromkeys(["min", "mins", "minute", "minutes"], "min"),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours", "hourly"], "h"),
    **dict.fromkeys(["day", "days", "daily"], "day"),
    **dict.fromkeys(["week", "weeks", "weekly"], "week"),
    **dict.fromkeys(["month", "months", "monthly"], "month"),
    **dict.fromkeys(["year", "years", "yearly", "annual", "annually"], "year"),
    **dict.fromkeys(["b", "byte", "bytes"], "B"),
    **dict.fromkeys(["kb", "kib", "kilobytes"], "KB"),
    **dict.fromkeys(["mb", "mib", "megabytes"], "MB"),
    **dict.fromkeys(["gb", "gib", "gigabytes"], "GB"),
    **dict.fromkeys(["tb", "tib", "terabytes"], "TB"),
    **dict.fromkeys(["%", "percent", "pct"], "%"),
    **dict.fromkeys(["usd", "$", "dollars"], "$"),
    **dict.fromkeys(["eur", "€", "euros"], "€"),
}
_MONTHS = {
    **{
        m: m
        for m in ["january", "february", "march", "april", "june", "july", "august", "september"]
    },
    **{m: m for m in ["october", "november", "december"]},
    "may": "may",
    **{
        "jan": "january",
        "feb": "february",
        "mar": "march",
        "apr": "april",
        "jun": "june",
        "jul": "july",
        "aug": "august",
        "sep": "september",
        "sept": "september",
        "oct": "october",
        "nov": "november",
        "dec": "december",
    },
}
_DAYS = {
    **{f"{d}day": f"{d}day" for d in ["mon", "tues", "wednes", "thurs", "fri", "satur", "sun"]},
    **{f"{d}days": f"{d}day" for d in ["mon", "tues", "wednes", "thurs", "fri", "satur", "sun"]},
    "weekend": "weekend",
    "weekends": "weekend",
    "weekday": "weekday",
    "weekdays": "weekday",
    "today": "today",
    "tomorrow": "tomorrow",
    "yesterday": "yesterday",
    "tonight": "tonight",
}
_DAY_PARTS = {
    "morning": "morning",
    "mornings": "morning",
    "afternoon": "afternoon",
    "afternoons": "afternoon",
    "evening": "evening",
    "evenings": "evening",
    "night": "night",
    "nights": "night",
    "nightly": "night",
    "noon": "noon",
    "midnight": "midnight",
}
_FREQUENCIES = {
    "hourly": "hour",
    "nightly": "day",
    "daily": "day",
    "weekly": "week",
    "biweekly": "2 weeks",
    "fortnightly": "2 weeks",
    "monthly": "month",
    "quarterly": "quarter",
    "yearly": "year",
    "annually": "year",
    "annual": "year",
}
_SEASONS = frozenset(["spring", "summer", "autumn", "fall", "winter"])
_QUANTIFIERS = {
    "all": "all",
    "some": "some",
    "most": "most",
    "many": "many",
    "few": "few",
    "several": "several",
    "half": "half",
    "full": "full",
    "double": "double",
    "single": "single",
    "both": "both",
    "only": "only",
    "biweekly": "alternate",
    "alternate": "alternate",
}
_NEGATORS = _words(
    """
    not no never none nobody nothing nowhere neither nor without cannot
    """
)
_NEGATING_PREFIXES = ("un", "non", "in", "im", "ir", "il", "dis", "a")
_OPPOSITES = [
    ("before", "after"),
    ("since", "until"),
    ("start", "end"),
    ("start", "finish"),
    ("starts", "ends"),
    ("starts", "finishes"),
    ("open", "closed"),
    ("enabled", "disabled"),
    ("enable", "disable"),
    ("allowed", "forbidden"),
    ("allow", "forbid"),
    ("required", "optional"),
    ("same", "different"),
    ("always", "never"),
    ("more", "less"),
    ("more", "fewer"),
    ("increase", "decrease"),
    ("increased", "decreased"),
    ("above", "below"),
    ("minimum", "maximum"),
    ("first", "last"),
    ("early", "late"),
    ("earlier", "later"),
    ("accept", "reject"),
    ("accepted", "rejected"),
    ("public", "private"),
    ("include", "exclude"),
    ("includes", "excludes"),
    ("included", "excluded"),
    ("add", "remove"),
    ("added", "removed"),
    ("light", "dark"),
    ("true", "false"),
    ("success", "failure"),
    ("succeeded", "failed"),
    ("online", "offline"),
    ("up", "down"),
    ("win", "lose"),
    ("won", "lost"),
    ("buy", "sell"),
    ("bought", "sold"),
    ("inbound", "outbound"),
    ("import", "export"),
    ("input", "output"),
    ("upper", "lower"),
    ("higher", "lower"),
    ("max", "min"),
]
_OPPOSITE = {(a, b) for a, b in _OPPOSITES} | {(b, a) for a, b in _OPPOSITES}
# A bound on the number that follows: "at least 12", "over 25 MB", "up to 5".
_BOUND_AFTER = {
    "over": ">",
    "above": ">",
    "exceeds": ">",
    "exceeding": ">",
    "under": "<",
    "below": "<",
    "within": "<=",
}
_BOUND_THAN = {
    **dict.fromkeys(["more", "larger", "greater", "bigger", "longer", "higher", "later"], ">"),
    **dict.fromkeys(["less", "fewer", "smaller", "shorter", "lower", "earlier"], "<"),
}
_BOUND_WORD = {"minimum": ">=", "maximum": "<="}


class _Text:
    """One text's tokens and the facts the rules compare."""

    def __init__(self, text: str) -> None:
        raw = text.replace("\u2019", "'")
        self.tokens: list[str] = []
        self.initial: list[bool] = []
        self.after_slash: list[bool] = []
        for match in _TOKEN.finditer(raw):
            self.tokens.append(match.group())
            before = raw[: match.start()]
            self.initial.append(not before.strip() or bool(_SENTENCE_END.search(before)))
            self.after_slash.append(before.endswith("/"))
        self.lower = [t.lower() for t in self.tokens]
        self.words = {_stem(w) for w in self.lower}
        self.numbers: set[str] = set()
        self.units: set[str] = set()
        self.months: set[str] = set()
        self.days: set[str] = set()
        self.day_parts: set[str] = set()
        self.seasons: set[str] = set()
        self.quantifiers: set[str] = set()
        self.frequencies: set[str] = set()
        self.bounds: set[str] = set()
        self.negated = False
        self._scan()

    def _scan(self) -> None:
        tokens, lower = self.tokens, self.lower
        n = len(tokens)
        for i, (tok, low) in enumerate(zip(tokens, lower)):
            prev = lower[i - 1] if i else ""
            nxt = lower[i + 1] if i + 1 < n else ""
            after_number = bool(i) and (
                _HAS_DIGIT.search(prev) is not None or prev in _NUMBER_WORDS
            )
            if low in _NEGATORS or low.endswith("n't") or (low == "no" and nxt == "longer"):
                self.negated = True
            if _HAS_DIGIT.search(low):
                self._number(low, nxt)
            elif low == "second" and not after_number:
                self.numbers.add("2")  # "every second Wednesday"
            elif low in _NUMBER_WORDS and not (low == "first" and nxt == "and"):
                self.numbers.add(_NUMBER_WORDS[low])
            if low in _UNITS and (
                after_number or prev == "per" or self.after_slash[i] or len(low) > 3 or low == "%"
            ):
                self.units.add(_UNITS[low])
            if low in _FREQUENCIES:
                self.frequencies.add(_FREQUENCIES[low])
            month = _MONTHS.get(low)
            if month and (
                (tok[0].isupper() and not (low == "may" and self.initial[i]))
                or _HAS_DIGIT.search(nxt)
                or after_number
            ):
                self.months.add(month)
            if low in _DAYS:
                self.days.add(_DAYS[low])
            if low in _DAY_PARTS:
                self.day_parts.add(_DAY_PARTS[low])
            if low in _SEASONS:
                self.seasons.add(low)
            if low in _QUANTIFIERS and not (low == "most" and prev == "at"):
                self.quantifiers.add(_QUANTIFIERS[low])
            if low == "other" and prev == "every":
                self.quantifiers.add("alternate")
            number_next = bool(_HAS_DIGIT.search(nxt)) or nxt in _NUMBER_WORDS
            if prev == "at" and low in ("least", "most"):
                self.bounds.add(">=" if low == "least" else "<=")
            elif low in _BOUND_AFTER and number_next:
                self.bounds.add(_BOUND_AFTER[low])
            elif low in _BOUND_THAN and nxt == "than":
                self.bounds.add(_BOUND_THAN[low])
            elif low in _BOUND_WORD:
                self.bounds.add(_BOUND_WORD[low])
            elif low == "up" and nxt == "to":
                self.bounds.add("<=")

    def _number(self, low: str, nxt: str) -> None:
        value = _GROUPED.sub("", low.lstrip("$€£#"))
        if value.endswith("%"):
            self.units.add("%")
        ordinal = _ORDINAL.match(value)
        if ordinal:
            value = ordinal.group(1)
        hour = _WHOLE_HOUR.match(value)
        if hour:
            value = hour.group(1)
        if nxt in ("am", "pm") and value.isdigit():
            value += nxt
        self.numbers.add(value.rstrip("%"))

    def plain(self) -> list[str]:
        """The lowercase tokens, possessive stripped."""
        return [low.removesuffix("'s") for low in self.lower]

    def capitalised(self) -> set[str]:
        """Words capitalised in mid-sentence, or in capitals (lowercase, possessive stripped)."""
        out = set()
        for tok, initial in zip(self.tokens, self.initial):
            if tok[0].isalpha() and tok[0].isupper() and (not initial or tok.isupper()):
                out.add(tok.lower().removesuffix("'s"))
        return out

    def names(self, other: _Text) -> set[str]:
        """Proper nouns, as :meth:`content` spells them: words without digits capitalised in
        mid-sentence or in capitals, and capitalised first words that are names elsewhere in
        either text ("Alice" in "Alice reviews Bob's code" vs "Bob reviews Alice's code")."""
        elsewhere = self.capitalised() | other.capitalised()
        out = set()
        for tok, initial in zip(self.tokens, self.initial):
            low = tok.lower().removesuffix("'s")
            if not tok[0].isalpha() or not tok[0].isupper() or _HAS_DIGIT.search(low):
                continue
            if low in _MONTHS or low in _DAYS or (low in _STOP and not tok.isupper()):
                continue
            if not initial or tok.isupper() or low in elsewhere:
                out.add(low)
        return out


def _stem(word: str) -> str:
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word


def _both_differ(a: set[str], b: set[str]) -> bool:
    return bool(a) and bool(b) and a != b


def _negates(a: set[str], b: set[str]) -> bool:
    """A word of ``a`` is a word of ``b`` with a negating prefix, or its opposite."""
    for x in a - b:
        for y in b - a:
            if (x, y) in _OPPOSITE:
                return True
            for longer, shorter in ((x, y), (y, x)):
                if len(shorter) >= 4 and any(longer == p + shorter for p in _NEGATING_PREFIXES):
                    return True
    return False


_SYMMETRIC = [
    {w}
    for w in ["and", "or", "nor", "&", "vs", "versus", "with", "is", "are", "was", "were", "equals"]
]


def _swapped(a: list[str], b: list[str]) -> bool:
    """``b`` is ``a`` with two phrases exchanged around the same words: P X M Y S vs P Y M X S
    ("X differs from Y" vs "Y differs from X"). Moving one phrase to the front or the end is
    not a swap (M is never empty), nor is exchanging the two sides of "and" or "is"."""
    if a == b or len(a) != len(b) or len(a) > 64 or Counter(a) != Counter(b):
        return False
    p = 0
    while a[p] == b[p]:
        p += 1
    s = 0
    while a[-1 - s] == b[-1 - s]:
        s += 1
    ma, mb = a[p : len(a) - s], b[p : len(b) - s]
    n = len(ma)
    for i in range(1, n - 1):
        for j in range(1, n - i):
            x, m, y = ma[:i], ma[i : n - j], ma[n - j :]
            if mb == y + m + x and set(m) not in _SYMMETRIC:
                return True
    return False


_SCOPE_PREPOSITIONS = _words(
    """
    on in at for from to during except excluding only outside inside within under
    """
)


def _narrowed(a: list[str], b: list[str]) -> bool:
    """``b`` is ``a`` with one phrase inserted that starts with a preposition."""
    extra = len(b) - len(a)
    if extra < 2:
        return False
    p = 0
    while p < len(a) and a[p] == b[p]:
        p += 1
    return b[:p] + b[p + extra :] == a and b[p] in _SCOPE_PREPOSITIONS


def disagreement(a: str, b: str) -> Disagreement | None:
    """Why the two texts state different facts (see the module docstring), or None."""
    ta, tb = _Text(a), _Text(b)
    if ta.numbers != tb.numbers or _both_differ(ta.units, tb.units):
        return "number"
    for x, y in (
        (ta.months, tb.months),
        (ta.days, tb.days),
        (ta.day_parts, tb.day_parts),
        (ta.seasons, tb.seasons),
    ):
        if _both_differ(x, y):
            return "date"
    if (
        ta.quantifiers != tb.quantifiers
        or _both_differ(ta.bounds, tb.bounds)
        or _both_differ(ta.frequencies, tb.frequencies)
    ):
        return "quantity"
    lower_a, lower_b = set(ta.lower), set(tb.lower)
    if ta.negated != tb.negated or _negates(lower_a, lower_b):
        return "negation"
    if _swapped(ta.plain(), tb.plain()):
        return "order"
    if _narrowed(ta.plain(), tb.plain()) or _narrowed(tb.plain(), ta.plain()):
        return "scope"
    if {_stem(w) for w in ta.names(tb)} - tb.words and {_stem(w) for w in tb.names(ta)} - ta.words:
        return "entity"
    return None


def facts_disagree(a: str, b: str) -> bool:
    """True when the two belief texts state different facts by a rule an embedding cannot see
    (numbers, dates, quantities, negation, the order of the things related, or a different
    named thing): such a pair must never be folded into one belief, however similar."""
    return disagreement(a, b) is not None
