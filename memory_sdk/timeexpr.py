"""Time expressions in Portuguese, English and Spanish, resolved against the message's date: pure, no I/O.

Why: a small model leaves "ontem" and "yesterday" unresolved (the fact was stored at the message's date), so the
valid time of a fact cannot rest on the model alone. `find_time_expressions` finds the expressions a chat message
uses ("ontem", "last Friday", "hace 3 días", "em março", "15/03/2024") and resolves each to a day with its
granularity; `valid_time` decides a fact's valid_from from them and the model's date. The rules, languages and
limits are in docs/write-pipeline.md ("Time"); docs/decisions.md says why this is not dateparser.

    >>> [e.day for e in find_time_expressions("Me mudei pra São Paulo ontem", datetime(2025, 6, 15, tzinfo=UTC))]
    [datetime.date(2025, 6, 14)]
"""

from __future__ import annotations

import calendar
import functools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal

from memory_sdk.text import short_text_cache

__all__ = ["Granularity", "TimeExpression", "ValidTime", "find_time_expressions", "valid_time"]

Granularity = Literal["day", "week", "month", "year"]


@dataclass(frozen=True)
class TimeExpression:
    """One expression found in a text: where it is, the day it resolves to and how precise it is.

    `day` is the first day of a named period ("mês passado" -> the 1st of last month, "last week" -> its Monday)
    and the exact day of a shift ("3 months ago" -> the same day three months back); `granularity` says which
    calendar unit the text pins down, so a model's date in the same unit agrees with it (`covers`).
    """

    text: str
    start: int
    end: int
    day: date
    granularity: Granularity
    relative: bool
    alternative: date | None = None  # the future reading of "na sexta", "em março", "15 de março"

    def covers(self, other: date) -> bool:
        """Whether `other` lies in the same day, ISO week, month or year as `day` (or as the alternative)."""
        return any(_same_unit(self.granularity, day, other) for day in (self.day, self.alternative) if day)


def _same_unit(granularity: Granularity, day: date, other: date) -> bool:
    if granularity == "day":
        return other == day
    if granularity == "week":
        return other.isocalendar()[:2] == day.isocalendar()[:2]
    if granularity == "month":
        return (other.year, other.month) == (day.year, day.month)
    return other.year == day.year


# --- vocabulary, folded (lowercase, no accents) -------------------------------------------------------------

_NUMBERS = {  # counting words, one to twelve, in order
    "en": "one two three four five six seven eight nine ten eleven twelve",
    "pt": "um dois tres quatro cinco seis sete oito nove dez onze doze",
    "es": "uno dos tres cuatro cinco seis siete ocho nueve diez once doce",
}
# other forms: "a week ago", "há uma semana", "há duas semanas", "hace una semana"
_NUMBER_EXTRA = {"en": {"a": 1, "an": 1}, "pt": {"uma": 1, "duas": 2}, "es": {"un": 1, "una": 1}}
_NUMBER_VALUE = {word: index for words in _NUMBERS.values() for index, word in enumerate(words.split(), start=1)}
_NUMBER_VALUE |= {word: value for extra in _NUMBER_EXTRA.values() for word, value in extra.items()}
_MONTHS = {
    "en": "january february march april may june july august september october november december",
    "pt": "janeiro fevereiro marco abril maio junho julho agosto setembro outubro novembro dezembro",
    "es": "enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre",
}
_MONTH_NUMBER = {word: index for words in _MONTHS.values() for index, word in enumerate(words.split(), start=1)}
_MONTH_NUMBER["setiembre"] = 9
_WEEKDAYS = {
    "en": "monday tuesday wednesday thursday friday saturday sunday",
    "pt": "segunda terca quarta quinta sexta sabado domingo",
    "es": "lunes martes miercoles jueves viernes sabado domingo",
}
_WEEKDAY_NUMBER = {word: index for words in _WEEKDAYS.values() for index, word in enumerate(words.split())}
# Portuguese weekday names that are also ordinals ("a sexta vez", "na quinta série"): they count only with
# "-feira", "na", or "passada" / "que vem" / "última" / "próxima" around them, and not before a noun they count.
_ORDINAL_WEEKDAYS = frozenset({"segunda", "terca", "quarta", "quinta", "sexta"})
_NOT_A_DAY_AFTER = (
    r"(?!\s+(?:vez|vezes|serie|tentativa|parte|colocad[oa]|lugar|classe|edicao|temporada|opcao|metade|mao)\b)"
)

_UNIT: dict[str, Granularity] = {"day": "day", "week": "week", "month": "month", "year": "year"}
_UNIT |= {"dia": "day", "semana": "week", "mes": "month", "ano": "year"}


def _alternation(words: str) -> str:
    return "|".join(sorted(words.split(), key=len, reverse=True))


_MONTH_RE = _alternation(" ".join([*_MONTHS.values(), "setiembre"]))
_EN_WEEKDAY_RE = _alternation(_WEEKDAYS["en"])
_ROMANCE_WEEKDAY_RE = _alternation(" ".join(dict.fromkeys(_WEEKDAYS["pt"].split() + _WEEKDAYS["es"].split())))
_EN_UNIT_RE = r"(?P<unit>day|week|month|year)s?"
_ROMANCE_UNIT_RE = r"(?P<unit>dia|semana|mes|ano)(?:s|es)?"
_YEAR_RE = r"(?P<year>(?:19|20)\d\d)"


def _number_re(language: str) -> str:
    return rf"(?P<n>\d{{1,3}}|{_alternation(' '.join([_NUMBERS[language], *_NUMBER_EXTRA[language]]))})"


# --- calendar arithmetic -------------------------------------------------------------------------------------


def _shift_months(day: date, months: int) -> date:
    """The same day `months` later (negative: earlier), clamped to the month's end (31 Mar - 1 month = 28/29 Feb)."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _period_start(base: date, unit: Granularity, offset: int) -> date:
    """The first day of the week (Monday), month or year `offset` units from the one holding `base`."""
    if unit == "week":
        return base - timedelta(days=base.weekday()) + timedelta(weeks=offset)
    if unit == "month":
        return _shift_months(base.replace(day=1), offset)
    return date(base.year + offset, 1, 1)


def _shift(base: date, unit: Granularity, amount: int) -> date:
    if unit == "day":
        return base + timedelta(days=amount)
    if unit == "week":
        return base + timedelta(weeks=amount)
    return _shift_months(base, amount * (12 if unit == "year" else 1))


def _latest(month: int, day: int, base: date) -> date | None:
    """The most recent `day`/`month` not after `base` ("15 de março", "29 Feb" reaches back to a leap year)."""
    for year in range(base.year, base.year - 8, -1):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate <= base:
            return candidate
    return None


def _valid_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


# --- rules: a folded pattern and what a match resolves to ----------------------------------------------------


@dataclass(frozen=True)
class _Reading:
    """What a match resolves to; `alternative` is the other reading of a text that does not say past or future
    ("na sexta": last Friday, or next; "em março" in June: this year's, or next year's)."""

    day: date
    granularity: Granularity
    relative: bool
    alternative: date | None = None


_Resolver = Callable[["re.Match[str]", date], _Reading | None]


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    resolve: _Resolver
    blocks: bool = False  # a span that is no date but hides a shorter one inside ("por la mañana" is no "mañana")


def _rule(pattern: str, resolve: _Resolver, *, blocks: bool = False) -> _Rule:
    return _Rule(re.compile(pattern), resolve, blocks)


def _has(match: re.Match[str], *groups: str) -> bool:
    """Whether any of these named groups took part in the match (patterns name only the groups they have)."""
    found = match.groupdict()
    return any(found.get(group) for group in groups)


def _days(offset: int) -> _Resolver:
    return lambda _match, base: _Reading(base + timedelta(days=offset), "day", True)


def _period(match: re.Match[str], base: date) -> _Reading:
    unit = _UNIT[match["unit"]]
    offset = -1 if _has(match, "last") else 1 if _has(match, "next") else 0
    return _Reading(_period_start(base, unit, offset), unit, True)


def _ago(match: re.Match[str], base: date) -> _Reading:
    amount = int(match["n"]) if match["n"].isdecimal() else _NUMBER_VALUE[match["n"]]
    unit = _UNIT[match["unit"]]
    return _Reading(_shift(base, unit, -amount), unit, True)


def _weekday(match: re.Match[str], base: date) -> _Reading | None:
    """Last Friday is the most recent Friday strictly before the message's day, next Friday the first one after.

    Without "last" or "next" ("na sexta", "on Friday") the past is read, as a chat mostly tells what happened, and
    the next one is the alternative.
    """
    name = match["wd"]
    qualified = match.groupdict().get("art") in ("na", "no") or _has(
        match, "last", "next", "feira", "last_after", "next_after"
    )
    if name in _ORDINAL_WEEKDAYS and not qualified:
        return None
    wanted = _WEEKDAY_NUMBER[name]
    following = base + timedelta(days=(wanted - base.weekday() - 1) % 7 + 1)
    previous = base - timedelta(days=(base.weekday() - wanted - 1) % 7 + 1)
    if _has(match, "next", "next_after"):
        return _Reading(following, "day", True)
    if _has(match, "last", "last_after"):
        return _Reading(previous, "day", True)
    return _Reading(previous, "day", True, alternative=following)


def _this_weekday(match: re.Match[str], base: date) -> _Reading:
    return _Reading(_period_start(base, "week", 0) + timedelta(days=_WEEKDAY_NUMBER[match["wd"]]), "day", True)


def _month(match: re.Match[str], base: date) -> _Reading | None:
    """ "em março": the most recent March not after the message (month granularity, its first day)."""
    month = _MONTH_NUMBER[match["month"]]
    if match["year"]:
        return _Reading(date(int(match["year"]), month, 1), "month", False)
    if not match["prep"]:
        return None  # a bare month name is too often something else: "I may", "a Maio", "o Março"
    year = base.year if month <= base.month else base.year - 1
    return _Reading(date(year, month, 1), "month", True, alternative=date(year + 1, month, 1))


def _day_month(match: re.Match[str], base: date) -> _Reading | None:
    """ "15 de março de 2024" is absolute; "15 de março" is the most recent one, or the next as the alternative."""
    month, day = _MONTH_NUMBER[match["month"]], int(match["d"])
    if match["year"]:
        found = _valid_date(int(match["year"]), month, day)
        return None if found is None else _Reading(found, "day", False)
    latest = _latest(month, day, base)
    if latest is None:
        return None
    return _Reading(latest, "day", True, alternative=_valid_date(latest.year + 1, month, day))


def _iso(match: re.Match[str], _base: date) -> _Reading | None:
    found = _valid_date(int(match["year"]), int(match["a"]), int(match["b"]))
    return None if found is None else _Reading(found, "day", False)


def _numeric(match: re.Match[str], _base: date) -> _Reading | None:
    """Day first (pt, es and most of the world); month first only when day first cannot be (03/15/2024)."""
    first, second, year = int(match["a"]), int(match["b"]), int(match["year"])
    found = _valid_date(year, second, first) or _valid_date(year, first, second)
    return None if found is None else _Reading(found, "day", False)


def _year(match: re.Match[str], _base: date) -> _Reading:
    return _Reading(date(int(match["year"]), 1, 1), "year", False)


def _blocked(_match: re.Match[str], _base: date) -> None:
    return None


_LAST = r"(?P<last>last|pass?ad[oa]|ultim[oa])"
_NEXT = r"(?P<next>next|proxim[oa])"
_PERIOD = r"(?P<unit>semana|mes|ano)"
_RULES: tuple[_Rule, ...] = (
    # days around the message
    _rule(
        r"\b(?:(?:the\s+)?day\s+before\s+yesterday|anteontem|anteayer|antier|antes\s+de\s+ayer)\b",
        _days(-2),
    ),
    _rule(r"\b(?:(?:the\s+)?day\s+after\s+tomorrow|depois\s+de\s+amanha|pasado\s+manana)\b", _days(2)),
    _rule(r"\b(?:yesterday|last\s+night|ontem|ayer)\b", _days(-1)),
    _rule(
        r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening)|hoje|hoy"
        r"|n?esta\s+(?:manha|tarde|noite|manana|noche))\b",
        _days(0),
    ),
    _rule(r"\b(?:tomorrow|amanha|manana(?:\s+por\s+la\s+manana)?)\b", _days(1)),
    # "mañana" is also "morning": "por la mañana", "las mañanas", "a mañana person" are no tomorrow
    _rule(r"\b(?:(?:la|las|una)\s+mananas?|a\s+manana)\b", _blocked, blocks=True),
    # named periods: last / this / next week, month, year
    _rule(rf"\b(?:{_LAST}|{_NEXT}|this)\s+(?P<unit>week|month|year)\b", _period),
    _rule(rf"\b{_PERIOD}\s+(?:{_LAST}|(?P<next>que\s+(?:vem|viene)))\b", _period),
    _rule(rf"\b(?:{_NEXT}|(?P<last>pasad[oa]))\s+{_PERIOD}\b", _period),
    _rule(rf"\bn?est[ae]\s+{_PERIOD}\b", _period),
    # shifts back: "3 days ago", "há 3 dias", "3 dias atrás", "faz 2 semanas", "hace 3 días"
    _rule(rf"\b{_number_re('en')}\s+{_EN_UNIT_RE}\s+ago\b", _ago),
    _rule(rf"\b(?:ha|faz)\s+{_number_re('pt')}\s+{_ROMANCE_UNIT_RE}(?:\s+atras)?\b", _ago),
    _rule(rf"\b{_number_re('pt')}\s+{_ROMANCE_UNIT_RE}\s+atras\b", _ago),
    _rule(rf"\bhace\s+{_number_re('es')}\s+{_ROMANCE_UNIT_RE}\b", _ago),
    # weekdays
    _rule(rf"\b(?:(?P<art>on)\s+|{_LAST}\s+|{_NEXT}\s+)?(?P<wd>{_EN_WEEKDAY_RE})\b", _weekday),
    _rule(rf"\bthis\s+(?P<wd>{_EN_WEEKDAY_RE})\b", _this_weekday),
    _rule(
        rf"\b(?:(?P<art>n?[ao]|el)\s+)?(?:{_LAST}\s+|{_NEXT}\s+)?(?P<wd>{_ROMANCE_WEEKDAY_RE})(?P<feira>[\s-]feira)?"
        rf"(?:\s+(?:(?P<last_after>pass?ad[oa])|(?P<next_after>que\s+(?:vem|viene))))?\b{_NOT_A_DAY_AFTER}",
        _weekday,
    ),
    # months and dates
    _rule(
        rf"\b(?:(?P<prep>in|em|en|since|desde)\s+)?(?P<month>{_MONTH_RE})(?:,?\s+(?:de\s+|of\s+)?{_YEAR_RE})?\b",
        _month,
    ),
    _rule(
        rf"\b(?P<d>[0-3]?\d)(?:o|st|nd|rd|th)?\s+(?:de\s+|of\s+)?(?P<month>{_MONTH_RE})"
        rf"(?:,?\s+(?:de\s+)?{_YEAR_RE})?\b",
        _day_month,
        blocks=True,  # "31 de fevereiro de 2024" is no day, nor "fevereiro de 2024"
    ),
    _rule(
        rf"\b(?P<month>{_MONTH_RE})\s+(?P<d>[0-3]?\d)(?:st|nd|rd|th)?\b(?:,?\s+{_YEAR_RE}\b)?", _day_month, blocks=True
    ),
    _rule(rf"\b{_YEAR_RE}(?P<sep>[-/])(?P<a>[01]?\d)(?P=sep)(?P<b>[0-3]?\d)(?!\d)", _iso),
    _rule(rf"\b(?P<a>[0-3]?\d)(?P<sep>[/.-])(?P<b>[0-3]?\d)(?P=sep){_YEAR_RE}(?!\d)", _numeric),
    _rule(rf"\b(?:in|em|en|since|desde)\s+(?:(?:o|el)\s+ano\s+(?:de\s+)?)?{_YEAR_RE}\b(?![.,/:-]?\d)", _year),
)


# --- finding -------------------------------------------------------------------------------------------------


def find_time_expressions(text: str, occurred_at: datetime) -> list[TimeExpression]:
    """Every time expression of `text`, in order, resolved against the day of `occurred_at` (in its own zone).

    Case and accents are ignored. Where matches overlap the longest wins ("sexta passada" over "sexta",
    "15 de março de 2024" over "março de 2024"); a blocking match hides what it covers ("por la mañana").

        >>> find_time_expressions("I quit two weeks ago", datetime(2025, 6, 15, tzinfo=UTC))[0].day
        datetime.date(2025, 6, 1)
    """
    return list(_expressions(text, occurred_at.date()))


@functools.lru_cache(maxsize=64)
def _expressions(text: str, base: date) -> tuple[TimeExpression, ...]:
    """find_time_expressions against the day `base`. Memoised: valid_time reads the same message for each fact
    of a write (at most 64 texts are kept)."""
    folded, origin = _fold(text)
    matches: list[tuple[int, int, _Reading | None]] = []
    for rule in _RULES:
        for match in rule.pattern.finditer(folded):
            try:
                reading = rule.resolve(match, base)
            except (OverflowError, ValueError):  # a shift past year 1 or 9999: no date to give
                continue
            if reading is not None or rule.blocks:
                matches.append((match.start(), match.end(), reading))
    kept: list[tuple[int, int, _Reading | None]] = []
    for start, end, reading in sorted(matches, key=lambda m: (m[0] - m[1], m[0])):
        if all(end <= other_start or start >= other_end for other_start, other_end, _ in kept):
            kept.append((start, end, reading))
    found = []
    for start, end, reading in sorted(kept, key=lambda m: m[0]):
        if reading is None:
            continue
        first, last = origin[start], origin[end - 1] + 1
        found.append(
            TimeExpression(
                text[first:last], first, last, reading.day, reading.granularity, reading.relative, reading.alternative
            )
        )
    return tuple(found)


def _fold(text: str) -> tuple[str, list[int]]:
    """`text` lowercased without accents ("Março" -> "marco", "1º" -> "1o"), and for each folded character the
    index of the character of `text` it came from, so spans point into the text as written."""
    if text.isascii():  # NFKD leaves ASCII as it is: one lowercase character for each
        return text.lower(), list(range(len(text)))
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        for part in unicodedata.normalize("NFKD", char).lower():
            if not unicodedata.combining(part):
                folded.append(part)
                origin.append(index)
    return "".join(folded), origin


# --- a fact's valid time -------------------------------------------------------------------------------------

Source = Literal["resolved", "model", "occurred_at"]


@dataclass(frozen=True)
class ValidTime:
    """A fact's valid_from and where it came from, for the trace: the resolver (`expression` says which words),
    the model, or the message's time; `overridden` is the model's date when it was not used."""

    valid_from: datetime
    source: Source
    why: str
    expression: str | None = None
    overridden: datetime | None = None


# The languages whose time words `find_time_expressions` reads: for any other, the model's date stands.
LANGUAGES = frozenset({"en", "pt", "es"})


def valid_time(
    model: datetime | None, fact_text: str, message: str, occurred_at: datetime, *, read_words: bool = True
) -> ValidTime:
    """Decide a fact's valid_from from the model's date and the time expressions of the fact, else the message.

    First do no harm: the words only fix what they show is wrong or missing (docs/write-pipeline.md, "Time"):
    1. with a model date: it stands unless the fact's own text holds one definite relative expression ("ontem",
       "last week", "3 days ago"; not a bare weekday, which may be a habit) that does not cover it: then the words
       give the date (a 1.5B model counts "ontem" wrong);
    2. without one: one definite relative expression of the fact or of the message's clauses about it gives the
       date, unless it covers the message's own day ("this week", "today": the message's time is as good);
    3. else the message's time. A future date of the model ("next week I start at Bosch") is kept.
    `read_words=False` (a language whose time words are not known) keeps the model's date or the message's time.
    """
    if not read_words:
        if model is not None:
            return ValidTime(model, "model", "the model's date (no time words read in this language)")
        return ValidTime(occurred_at, "occurred_at", "no date")
    if model is not None:
        model_day = model.astimezone(occurred_at.tzinfo).date()
        own = [e for e in find_time_expressions(fact_text, occurred_at) if e.relative and e.alternative is None]
        if own and not any(e.covers(model_day) for e in own) and len({(e.day, e.granularity) for e in own}) == 1:
            chosen = own[0]
            why = f"{chosen.text!r} is {chosen.day:%Y-%m-%d}; the model's {model:%Y-%m-%d} disagrees"
            return ValidTime(_start_of(chosen.day, occurred_at), "resolved", why, chosen.text, model)
        return ValidTime(model, "model", "the model's date")
    candidates = find_time_expressions(fact_text, occurred_at) or _message_expressions(fact_text, message, occurred_at)
    definite = [e for e in candidates if e.relative and e.alternative is None]
    if len({(e.day, e.granularity) for e in definite}) == 1 and not definite[0].covers(occurred_at.date()):
        chosen = definite[0]
        return ValidTime(
            _start_of(chosen.day, occurred_at), "resolved", f"{chosen.text!r} is {chosen.day:%Y-%m-%d}", chosen.text
        )
    return ValidTime(occurred_at, "occurred_at", "no date" if not definite else "the words give no one earlier day")


def _start_of(day: date, occurred_at: datetime) -> datetime:
    """The message's own time on its own day (the most precise we know), else the day at 00:00 UTC, as the dates
    the model gives are stored."""
    return occurred_at if day == occurred_at.date() else datetime.combine(day, time.min, tzinfo=UTC)


# A message is cut into clauses at sentence ends and at the conjunctions that join two statements; a fact tied to
# clauses by a shared word takes only the expressions of those clauses ("Moro em Curitiba e ontem fui ao cinema":
# "ontem" is not when Rafael began to live in Curitiba).
_CLAUSE_BREAK = re.compile(r"[.!?;\n]+|\s+(?:e|and|y|mas|but|pero|then|depois|luego)\s+", re.IGNORECASE)
_STOPWORD_TEXT = (
    "the and that this with from have has had for are was were his her its our their they them you your "
    "que com por para uma uns umas dos das nos nas pra pro ele ela eles elas isso essa esse esta este meu minha "
    "los las del una unos unas con mis sus ellos ellas pero como muy mas"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _message_expressions(fact_text: str, message: str, occurred_at: datetime) -> list[TimeExpression]:
    """The message's expressions that may date this fact: all of them, unless the fact shares a word with some
    clauses, then only theirs. Facts are often rewritten ("Rafael moved to São Paulo" from "Me mudei pra SP
    ontem"), so a fact that shares no word with any clause is not told apart."""
    expressions = find_time_expressions(message, occurred_at)
    if not expressions:
        return []
    breaks = [match.end() for match in _CLAUSE_BREAK.finditer(message)]
    bounds = list(zip([0, *breaks], [*breaks, len(message)], strict=True))
    words = _words(fact_text)
    tied = [start for start, end in bounds if words & _words(message[start:end])]
    if not tied:
        return expressions
    return [e for e in expressions if _clause_start(e.start, breaks) in tied]


def _clause_start(position: int, breaks: list[int]) -> int:
    return max((b for b in breaks if b <= position), default=0)


@short_text_cache(maxsize=1024)
def _words(text: str) -> frozenset[str]:
    """The content words of a fact or a clause, folded. Memoised (short_text_cache): each fact of a write is tied
    to the same clauses of the message."""
    return frozenset(word for word in re.findall(r"[a-z0-9]{3,}", _fold(text)[0]) if word not in _STOPWORDS)
