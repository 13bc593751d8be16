"""CPU per write (issue 8, session 19): the memoised and rewritten string functions of the guards, text, time and
token code return exactly what the code before them returned, and their caches stay bounded.

Each rewritten function is compared with a reference: the implementation it replaced, kept here verbatim as the
specification. The inputs are varied on purpose: ASCII and accented text, symbols with no word, NUL and lone
surrogates, kinship phrases, negations, time expressions, newlines, and texts longer than the short-text limit.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
import re
import unicodedata
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_sdk import lexicons, text, timeexpr
from memory_sdk.llm import tokens
from memory_sdk.pipeline import guards, post_extraction, relatives
from memory_sdk.pipeline.guards import Name, inferred_attribute, shares_a_topic
from memory_sdk.text import SHORT_TEXT_CHARS, clean_strings, fold, message_ngrams, short_text_cache

_VOCABULARY = (  # noqa: SIM905
    "Rafael Ana Melanie Caroline São Paulo Curitiba Acme Globex Initech mora trabalha na em moved to lives in works "
    "at joined started a new job Hope Counseling minha mãe meu irmão Pedro irmã da Ana my sister Julia mom best "
    "friend não never no longer ya no used to costumava ontem yesterday two weeks ago semana passada 15 de março de "
    "2024 2025-06-01 last Friday sexta the and com para PhD guitarra guitar namorando Ångström ß ﬁ café naïve 😀 🍕 "
    "日本語 , . ! ? ; : ' - ( ) \n \t x00 Dr. João-Pedro isn't as an designer como"
).split(" ")


def _texts(count: int, seed: int = 19) -> Iterator[str]:
    """`count` varied texts: random runs of the vocabulary, with NUL, surrogates and capitals sprinkled in."""
    rng = random.Random(seed)
    fixed = ["", " ", "😀", "🍕 😀", "\x00", "a\ud800b", "Ana", "A" * (SHORT_TEXT_CHARS + 1), "ana " * 200]
    yield from fixed
    for _ in range(count - len(fixed)):
        words = [rng.choice(_VOCABULARY) for _ in range(rng.randint(1, 40))]
        sample = " ".join(words).replace("x00", "\x00" if rng.random() < 0.1 else "x00")
        yield sample.upper() if rng.random() < 0.1 else sample


TEXTS = list(_texts(400))


# --- the references: the implementations before session 19, verbatim ---------------------------------------------


def _reference_fold(value: str) -> str:
    if value.isascii():
        return value.lower()
    decomposed = unicodedata.normalize("NFKD", value.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _reference_message_ngrams(message: str, max_words: int = text.MAX_ALIAS_WORDS) -> list[str]:
    words = text._words(message).split()
    grams: dict[str, None] = {}
    for start in range(len(words)):
        for size in range(1, max_words + 1):
            if start + size > len(words):
                break
            grams[" ".join(words[start : start + size])] = None
    return list(grams)


def _reference_clean_strings(value: Any) -> Any:
    if isinstance(value, str):
        return text.clean_text(value)
    if isinstance(value, dict):
        return {_reference_clean_strings(key): _reference_clean_strings(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_reference_clean_strings(item) for item in value]
    return value


_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def _reference_estimate_tokens(value: str) -> int:
    count = 0
    for piece in _PIECE.findall(value):
        count += max(1, -(-len(piece) // 4)) if len(piece) > 6 else 1
    return count


def _reference_time_fold(value: str) -> tuple[str, list[int]]:
    folded: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(value):
        for part in unicodedata.normalize("NFKD", char).lower():
            if not unicodedata.combining(part):
                folded.append(part)
                origin.append(index)
    return "".join(folded), origin


def _reference_grams(value: str, speaker: str) -> frozenset[str]:
    grams = set(_reference_message_ngrams(value))
    terms = {gram for gram in grams if " " not in gram and guards._is_relation_word(gram)}
    around = [guards._relative_form(gram, speaker) for gram in grams if not terms.isdisjoint(gram.split(" "))]
    return frozenset(grams.union(form for form in around if form is not None))


def _reference_strip_accents(value: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", value) if not unicodedata.combining(c))


def _reference_inferred_attribute(value: str, given: str | None) -> tuple[str, str] | None:
    if given not in (None, "job_title") or lexicons.denied(value) or guards._past_habit(value):
        return None
    plain = _reference_strip_accents(value)
    for attribute, pattern in guards._ATTRIBUTE_PATTERNS:
        match = pattern.search(plain)
        if match is None or not match.group("object")[:1].isupper() or attribute == given:
            continue
        if given == "job_title" and (attribute != "employer" or guards._titled(plain)):
            return None
        return attribute, f"{match.group(0)!r} says {attribute}" + (f" (the model said {given})" if given else "")
    return None


def _reference_shares_a_topic(value: str, other: str, subject: str) -> bool:
    name = set(text.normalise_alias(subject).split()) | {"s"}

    def topics(item: str) -> set[str]:
        return {w[:4] for w in text.normalise_alias(item).split() if len(w) >= 3 and w not in guards._STOPWORDS} - {
            w[:4] for w in name
        }

    said, said_other = _reference_inferred_attribute(value, None), _reference_inferred_attribute(other, None)
    if said is not None and said_other is not None and said[0] == said_other[0]:
        return True
    return bool(topics(value) & topics(other))


def _reference_first_person(value: str, speaker: str) -> bool:
    words = text.normalise_alias(value).split()
    relative = {
        index
        for start in range(len(words))
        for size in (2, 3)
        if guards._has_relation_word(phrase := " ".join(words[start : start + size]))
        and relatives.relative_term(phrase, speaker) is not None
        for index in range(start, start + size)
    }
    return any(word in guards._FIRST_PERSON for index, word in enumerate(words) if index not in relative)


# --- memoised functions: the same answers, bounded caches ---------------------------------------------------------

ONE_TEXT = [
    text.normalise_alias,
    lexicons.denied,
    tokens._line_tokens,
    guards._topics,
    guards._name_topics,
    timeexpr._words,
]


@pytest.mark.parametrize("function", ONE_TEXT, ids=lambda f: f.__name__)
def test_a_memoised_text_function_answers_as_its_uncached_self(function: text.CachedText[[str], Any]) -> None:
    function.cache_clear()
    for value in TEXTS * 2:  # the second round is answered from the cache
        assert function(value) == function.uncached(value), value
    assert function.cache_info().hits >= len({v for v in TEXTS if len(v) <= SHORT_TEXT_CHARS})


def test_relative_of_memoised_answers_as_uncached_for_each_speaker() -> None:
    relatives.relative_of.cache_clear()
    phrases = [*TEXTS[:150], "minha mãe", "a irmã da Ana", "Ana's sister Julia", "my best friend", "irmão do Rafael"]
    for phrase, speaker in itertools.product(phrases * 2, ["Rafael", "Ana", ""]):
        assert relatives.relative_of(phrase, speaker) == relatives.relative_of.uncached(phrase, speaker)
    assert relatives.relative_of.cache_info().hits > 0


def test_attribute_reading_is_inferred_attribute_for_every_given_attribute() -> None:
    attributes = [None, "job_title", "employer", "lives_in", "hobby"]
    samples = [
        *TEXTS,
        "Tom moved to Denver yesterday",
        "Rafael mudeu pra São Paulo ontem",
        "Caroline started a new job at Hope Counseling",
        "Ana trabalha na Globex como designer",
        "Rafael não trabalha mais na Acme",
        "Ana used to live in Lima",
        "Ana works at acme",
    ]
    for value, given in itertools.product(samples * 2, attributes):
        assert inferred_attribute(value, given) == _reference_inferred_attribute(value, given), (value, given)


def test_shares_a_topic_answers_as_before_for_pairs_of_texts() -> None:
    rng = random.Random(8)
    pairs = [(rng.choice(TEXTS), rng.choice(TEXTS)) for _ in range(400)]
    pairs += [("Rafael moved to Austin", "Rafael lives in São Paulo"), ("Melanie's mom is a painter", "Melanie")]
    for (value, other), subject in itertools.product(pairs, ["Rafael", "Melanie's mom", "😀", ""]):
        assert shares_a_topic(value, other, subject) == _reference_shares_a_topic(value, other, subject)


def test_short_text_caches_are_bounded_and_skip_long_texts() -> None:
    calls: list[str] = []

    @short_text_cache(maxsize=8)
    def upper(value: str) -> str:
        calls.append(value)
        return value.upper()

    for n in range(50):
        assert upper(f"name {n}") == f"NAME {n}"
    assert upper.cache_info().currsize == 8
    long = "x" * (SHORT_TEXT_CHARS + 1)
    upper(long)
    upper(long)
    assert calls.count(long) == 2  # computed each time, never kept
    assert upper.cache_info().currsize == 8
    for function in [*ONE_TEXT, relatives.relative_of]:
        assert function.cache_info().maxsize is not None


# --- rewritten functions: the same answers as the code they replaced ----------------------------------------------


def test_fold_answers_as_before_for_every_character_up_to_the_cjk_block() -> None:
    characters = ["a" + chr(code) + "b" for code in range(0x80, 0x3000) if not 0xD800 <= code < 0xE000]
    for value in [*TEXTS, *characters, "".join(characters)]:
        assert fold(value) == _reference_fold(value), value


def test_message_ngrams_are_the_same_list_in_the_same_order() -> None:
    for value, size in itertools.product(TEXTS, [0, 1, 2, 6, 8]):
        assert message_ngrams(value, size) == _reference_message_ngrams(value, size)


def test_clean_strings_gives_the_same_value_for_nested_json_like_values() -> None:
    class Label(str):
        pass

    value = {
        "plain": TEXTS[:40],
        "nul\x00key": ("a\x00", "b\ud800", 1, 2.5, True, None, Label("é\x00")),
        "nested": [{"k": [TEXTS[41], {"deep": ["\x00", 3]}]}, Label("x")],
        Label("label"): "ok",
    }
    cleaned = clean_strings(value)
    assert cleaned == _reference_clean_strings(value)
    assert cleaned["nul\x00".replace("\x00", "") + "key"][0] == "a"
    assert [type(item) for item in cleaned["plain"]] == [str] * 40


def test_estimate_tokens_counts_as_before() -> None:
    rng = random.Random(3)
    alphabet = "abcdefghé ç_0.,!? \n\t😀–日本語"
    randoms = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(2000)]
    for value in [*TEXTS, *randoms, "\n".join(TEXTS)]:
        assert tokens.estimate_tokens(value) == _reference_estimate_tokens(value), value


def test_time_fold_maps_each_folded_character_to_its_source_as_before() -> None:
    for value in [*TEXTS, "Março 1º", "ontem às 15h", "ﬁ ß İ"]:
        assert timeexpr._fold(value) == _reference_time_fold(value)


def test_time_expressions_read_from_the_cache_are_new_lists_equal_to_a_fresh_reading() -> None:
    occurred = datetime(2025, 6, 15, 18, tzinfo=UTC)
    message = "Ontem me mudei pra Curitiba e semana passada comecei na Acme"
    first = timeexpr.find_time_expressions(message, occurred)
    first.clear()  # a caller mutating its list does not change what the next caller gets
    again = timeexpr.find_time_expressions(message, occurred)
    timeexpr._expressions.cache_clear()
    assert again == timeexpr.find_time_expressions(message, occurred)
    assert [e.text for e in again] == ["Ontem", "semana passada"]


def _probes(texts: list[str]) -> set[str]:
    """Phrases to ask a Grams: every n-gram and kinship form of the texts, their words run together across texts,
    and what is no n-gram (empty, spaced, 7 words, symbols, newlines)."""
    probes = set().union(*(_reference_grams(value, "Rafael") for value in texts))
    words = [word for value in texts for word in text.message_words(value)]
    probes |= {" ".join(words[start : start + size]) for start in range(len(words)) for size in (2, 6, 7)}
    probes |= {"", " ", "  ", " ana", "ana ", "ana  ana", "a b c d e f g", "a b c d e f", "😀", "\n", "ana \n ana"}
    return probes | {f"{a} \n {b}" for a, b in itertools.pairwise(words[:40])}


def test_grams_answer_membership_as_the_set_of_n_grams_did() -> None:
    guards._grams.cache_clear()
    rng = random.Random(4)
    for value in TEXTS:
        expected = _reference_grams(value, "Rafael")
        grams = guards._grams(value, "Rafael")
        others = [value, rng.choice(TEXTS), "minha mãe e a irmã da Ana", "a friend of mine"]
        for phrase in _probes(others):
            assert (phrase in grams) == (phrase in expected), (value, phrase)
        assert grams.any_of(["zzz", *sorted(expected)[:1]]) == bool(expected)


def test_grams_of_joined_parts_are_the_grams_of_the_joined_text() -> None:
    rng = random.Random(5)
    short = [value for value in TEXTS if len(value.split()) < 4]
    for _ in range(150):
        parts = tuple(rng.choice(short if rng.random() < 0.5 else TEXTS) for _ in range(rng.randint(0, 5)))
        joined = "\n".join(parts)
        expected = _reference_grams(joined, "Rafael")
        grams = guards._joined_grams(parts, "Rafael")
        assert all((phrase in grams) == (phrase in expected) for phrase in _probes(list(parts))), parts
        assert guards._joined_content_words(parts) == guards._content_words.__wrapped__(joined), parts


def test_grams_of_texts_read_apart_are_the_union_of_their_n_grams() -> None:
    rng = random.Random(6)
    for _ in range(150):
        parts = [rng.choice(TEXTS) for _ in range(rng.randint(0, 4))]
        expected = set().union(*(_reference_grams(value, "Rafael") for value in parts))
        grams = guards.Grams.apart(guards._grams(value, "Rafael") for value in parts)
        assert all((phrase in grams) == (phrase in expected) for phrase in _probes(parts)), parts


def test_first_person_answers_as_before() -> None:
    guards._first_person.cache_clear()
    samples = [*TEXTS, "minha mãe mora comigo", "my mom and I", "eu e meu irmão", "a friend of mine", "irmão do Rafael"]
    for value, speaker in itertools.product(samples, ["Rafael", "Ana"]):
        assert guards._first_person(value, speaker) == _reference_first_person(value, speaker), value


def test_unit_vectors_are_the_same_floats_as_before() -> None:
    rng = random.Random(11)
    for size in (0, 1, 3, 1536):
        vector = [rng.uniform(-1, 1) for _ in range(size)]
        # Left to right, as `sum` added floats up to Python 3.11 (3.12's `sum` compensates its rounding).
        squares = functools.reduce(operator.add, (x * x for x in vector), 0.0)
        norm = squares**0.5 if vector else 0.0
        # _unit returns a numpy array (tests/test_cpu_per_write_s21.py holds its bits to these).
        expected = [x / math.sqrt(squares) for x in vector] if norm else []
        assert post_extraction._unit(vector).tolist() == (expected or vector)


# --- cost: the known memory is read once per write, whatever the number of facts -----------------------------------


def test_the_known_memory_is_split_into_words_once_per_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ground_entities` reads the message, the recent messages and the known memory apart; each fact's grounding
    (`_overlap`) reads the recent messages and the known memory joined. The joined text used to be split into words
    and n-grams again (the known memory twice a write, ~1 ms at 100 facts); now its n-grams come from the parts'
    (`_joined_grams`), and every text is split once however many facts the write has."""
    memory = " ".join(f"Rafael ran {n} km around Barigui Park with his sister on day {n}." for n in range(60))
    recent = ["Ana: I moved to Lisbon last week", "Rafael: my mom is visiting"]
    message = "Today I ran 10 km with my sister Julia"
    split: list[str] = []
    words_of: Callable[[str], list[str]] = guards.names.message_words

    def counted(value: str) -> list[str]:
        split.append(value)
        return words_of(value)

    monkeypatch.setattr(guards.names, "message_words", counted)
    for cached in (guards._grams, guards._text_words, guards._joined_grams, guards._joined_content_words):
        cached.cache_clear()
    for value in [message, *recent, memory]:  # as ground_entities reads them
        guards._grams(value, "Rafael")
    speaker = [Name("Rafael", frozenset({"rafael"}), person=True)]
    facts = [f"Rafael ran {n} km with his sister" for n in range(12)]
    for fact in facts:
        guards._overlap(fact, message, [*recent, memory], speaker)
    assert sum(memory in value for value in split) == 1
    assert guards._joined_content_words.cache_info().misses == 1  # not once per fact
    assert sorted(split) == sorted([message, *recent, memory, *facts])
