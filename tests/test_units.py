"""Pure functions and the shipped test doubles: no database, no network."""

from __future__ import annotations

import asyncio
import json
import random
import re
import unicodedata
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel, ValidationError

from memory_sdk import MemoryConfig
from memory_sdk.config import DEFAULT_SINGLE_VALUED_ATTRIBUTES
from memory_sdk.errors import ConfigError, InvalidResponse
from memory_sdk.lexicons import denied
from memory_sdk.llm import prompts
from memory_sdk.llm.parsing import parse_json_object, parse_response
from memory_sdk.llm.protocols import PURPOSES, ChatMessage
from memory_sdk.llm.schemas import (
    MAX_ALIASES,
    EntityScanResponse,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    FactExtractionResponse,
    InformedExtractionResponse,
)
from memory_sdk.llm.tokens import estimate_tokens
from memory_sdk.pipeline import post_extraction
from memory_sdk.pipeline.post_extraction import (
    MIRROR_CONFIDENCE,
    NEAR_DUPLICATE_WINDOW,
    canonicalise,
    cosine,
    drop_near_duplicates,
    plan_mirror_facts,
    refused_attribute,
    says_more,
    two_facts,
)
from memory_sdk.pipeline.pre_retrieval import ContextItem, fit_to_budget
from memory_sdk.pipeline.state import Extraction, PreparedFact
from memory_sdk.pipeline.upsert import choose_evidence
from memory_sdk.testing import HashEmbedder, ScriptedLLM, UnscriptedPurposeError
from memory_sdk.text import entity_key, fold, message_ngrams, normalise_alias, slugify

# --- memory_sdk.text ------------------------------------------------------------------------------------------


def test_fold_removes_case_and_accents() -> None:
    assert fold("São Paulo") == "sao paulo"
    assert fold("JOÃO Ávila Çelik") == "joao avila celik"
    assert fold("Straße") == "strasse"  # casefold, not lower


def test_fold_of_ascii_text_is_the_full_decomposition() -> None:
    """ASCII text skips the decomposition (a per-character loop over the known memory of every write): the short
    path must give what the long one gives, for every ASCII character."""
    every_ascii = "".join(map(chr, range(128)))
    decomposed = unicodedata.normalize("NFKD", every_ascii.casefold())
    assert fold(every_ascii) == "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    assert fold("Rafael Ran 5 KM") == "rafael ran 5 km"


def test_normalise_alias_collapses_punctuation_and_spaces() -> None:
    assert normalise_alias("  Dr.  João-Pedro   Ávila! ") == "dr joao pedro avila"
    assert normalise_alias("Orion Tech") == normalise_alias("orion   TECH") == "orion tech"
    assert normalise_alias("   ") == ""


def test_names_without_letters_or_digits_keep_distinct_names_and_keys() -> None:
    assert normalise_alias("!!!") == "!!!"
    assert normalise_alias("😀") != normalise_alias("🍕")
    keys = {entity_key("person", name) for name in ("😀", "🙂", "🍕", "🎉")}
    assert len(keys) == 4 and "person:" not in keys
    assert all(key.removeprefix("person:").isidentifier() for key in keys)  # word characters only
    assert entity_key("person", "😀") == entity_key("person", " 😀 ")


def test_slugify_and_entity_key_fold_accents_into_snake_case() -> None:
    assert slugify("São Paulo") == "sao_paulo"
    assert entity_key("place", "São Paulo") == "place:sao_paulo"
    assert entity_key("Person", "Clara Rezende") == "person:clara_rezende"
    assert entity_key("", "Jazz") == "concept:jazz"


def test_message_ngrams_are_word_bounded_and_folded() -> None:
    grams = message_ngrams("Falei com a Ana Luíza ontem!")
    assert "ana luiza" in grams
    assert "ana" in grams
    assert "an" not in grams  # word-bounded: no fragments of words
    assert "falei com a ana luiza ontem" in grams
    assert len(grams) == len(set(grams))


def test_message_ngrams_stop_at_max_words() -> None:
    grams = message_ngrams("one two three four", max_words=2)
    assert grams == ["one", "one two", "two", "two three", "three", "three four", "four"]


def test_message_ngrams_of_empty_message_is_empty() -> None:
    assert message_ngrams("  ...  ") == []


# --- memory_sdk.llm.tokens ------------------------------------------------------------------------------------


def test_estimate_tokens_is_non_zero_for_any_word_or_mark() -> None:
    for text in ("a", "?", "Olá", "São Paulo", "x" * 50):
        assert estimate_tokens(text) >= 1, text
    assert estimate_tokens("") == 0


def test_estimate_tokens_never_decreases_as_text_grows() -> None:
    text = "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia, supercalifragilístico!"
    counts = [estimate_tokens(text[:end]) for end in range(len(text) + 1)]
    assert counts == sorted(counts)
    assert counts[-1] > len(text.split())  # punctuation and long words count extra


def test_estimate_tokens_grows_with_long_words() -> None:
    assert estimate_tokens("internationalisation") > estimate_tokens("nation")


# --- memory_sdk.llm.parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        '{"entities": []}',
        '```json\n{"entities": []}\n```',
        '```\n{"entities": []}\n```',
        'Sure! Here it is:\n```JSON\n{"entities": []}\n```\nAnything else?',
        '<think>The user wants {"x": 1}? No.</think>\n{"entities": []}',
        '{"entities": []}\n\nI hope this helps, let me know {if} you need more.',
        'Here you go: {"entities": []}',
    ],
    ids=["plain", "json-fence", "bare-fence", "chatter-around-fence", "think-block", "trailing-chatter", "preamble"],
)
def test_parse_json_object_accepts_common_wrappings(answer: str) -> None:
    assert parse_json_object(answer) == {"entities": []}


@pytest.mark.parametrize(
    "answer",
    ["", "no json here", "[1, 2, 3]", '"just a string"', '{"entities": [}', "```json\n```", "null"],
    ids=["empty", "prose", "array", "string", "broken", "empty-fence", "null"],
)
def test_parse_json_object_rejects_anything_but_one_object(answer: str) -> None:
    with pytest.raises(InvalidResponse):
        parse_json_object(answer)


def test_parse_response_validates_against_the_purpose_schema() -> None:
    parsed = parse_response(
        '```json\n{"facts": [{"subject": "Ana", "text": "Ana loves jazz"}]}\n```', FactExtractionResponse
    )
    assert [(f.subject, f.text, f.action) for f in parsed.facts] == [("Ana", "Ana loves jazz", "NEW")]


def test_parse_response_missing_required_key_is_invalid_response_not_empty_result() -> None:
    with pytest.raises(InvalidResponse, match="FactExtractionResponse"):
        parse_response('{"fact": [{"subject": "Ana", "text": "Ana loves jazz"}]}', FactExtractionResponse)


def test_aliases_past_the_cap_are_ignored() -> None:
    entity = ExtractedEntity.model_validate({"name": "Ana", "aliases": [f"A{n}" for n in range(MAX_ALIASES + 3)]})
    assert entity.aliases == [f"A{n}" for n in range(MAX_ALIASES)]


def test_parse_response_drops_a_malformed_item_alone_and_says_so() -> None:
    parsed = parse_response(
        '{"facts": [{"subject": "Ana"}, {"subject": "Ana", "text": "Ana loves jazz"}]}', FactExtractionResponse
    )
    assert [f.text for f in parsed.facts] == ["Ana loves jazz"]
    assert parsed.dropped == ["1 facts dropped as malformed (facts[0].text: Field required)"]


def test_parse_response_ignores_extra_keys_and_defaults_missing_optional_ones() -> None:
    parsed = parse_response('{"entities": [{"name": "Ana", "nickname": "Aninha"}], "debug": true}', EntityScanResponse)
    assert parsed.entities == [ExtractedEntity(name="Ana", type="concept", aliases=[])]
    informed = parse_response('{"entities": [], "facts": [], "relations": []}', InformedExtractionResponse)
    assert (informed.updated_profiles, informed.emotion) == ({}, None)


def test_parse_response_of_an_object_with_none_of_the_extraction_keys_is_invalid() -> None:
    answer = '{"answer": "I cannot help with that."}'
    try:
        parsed = parse_response(answer, InformedExtractionResponse)
    except InvalidResponse:
        return
    raise AssertionError(f"parsed as an empty extraction: {parsed!r}")


# --- memory_sdk.llm.prompts -----------------------------------------------------------------------------------


@pytest.fixture
def fresh_prompt_cache() -> Iterator[None]:
    """load_prompt caches per process: clear it around tests that swap the prompts directory."""
    prompts.load_prompt.cache_clear()
    yield
    prompts.load_prompt.cache_clear()


_PROMPT_FILES = sorted(path.stem for path in prompts.prompts_dir().glob("*.md"))


def test_prompt_files_exist_for_every_extraction_purpose() -> None:
    assert {"informed_extraction", "entity_scan", "fact_extraction", "relation_extraction"} <= set(_PROMPT_FILES)
    assert set(_PROMPT_FILES) <= set(PURPOSES)


@pytest.mark.parametrize("purpose", _PROMPT_FILES)
def test_every_prompt_file_loads_and_renders_every_placeholder(purpose: Any, fresh_prompt_cache: None) -> None:
    template = prompts.load_prompt(purpose)
    assert template.purpose == purpose
    assert template.version.startswith(f"{purpose}/v")
    fields = template.context_model.model_fields
    context = template.context_model(**{name: f"<<{name.upper()}>>" for name in fields})
    messages = template.render(context)
    assert [m["role"] for m in messages] == ["system", "user"]
    rendered = "\n".join(m["content"] for m in messages)
    for name in fields:
        assert f"<<{name.upper()}>>" in rendered
        assert f"${name}" not in rendered


def _copy_prompts(tmp_path: Path) -> Path:
    for path in prompts.prompts_dir().glob("*.md"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda text: text.replace("$message", "the message"), "placeholders"),
        (lambda text: text.replace("$message", "$message $mood"), "placeholders"),
        (lambda text: re.sub(r"version: \d+", "author: x", text), "version"),
        (lambda text: text.replace("## user", "## assistant"), "section"),
        (lambda text: text.replace("Speaker: $speaker.", "Speaker: $speaker costs $5."), "placeholder"),
    ],
    ids=["missing-placeholder", "extra-placeholder", "no-version", "no-user-section", "stray-dollar"],
)
def test_broken_prompt_template_fails_at_load_with_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_prompt_cache: None, edit: Any, problem: str
) -> None:
    directory = _copy_prompts(tmp_path)
    path = directory / "entity_scan.md"
    original = path.read_text(encoding="utf-8")
    edited = edit(original)
    assert edited != original
    path.write_text(edited, encoding="utf-8")
    monkeypatch.setattr(prompts, "prompts_dir", lambda: directory)
    with pytest.raises(ConfigError, match=problem):
        prompts.load_prompt("entity_scan")
    prompts.load_prompt("fact_extraction")  # the other, untouched files still load


def test_missing_prompt_file_fails_with_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_prompt_cache: None
) -> None:
    monkeypatch.setattr(prompts, "prompts_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        prompts.load_prompt("informed_extraction")


def test_render_refuses_the_context_of_another_purpose(fresh_prompt_cache: None) -> None:
    template = prompts.load_prompt("relation_extraction")
    other = prompts.EntityScanContext(speaker="Rafael", occurred_at="today", recent_messages="", message="hi")
    with pytest.raises(TypeError):
        template.render(other)  # type: ignore[arg-type]


# --- memory_sdk.config.MemoryConfig ---------------------------------------------------------------------------


def test_memory_config_defaults_are_the_designed_ones() -> None:
    config = MemoryConfig()
    assert config.extraction_timeout_sec == 30
    assert config.enable_informed_extraction is True
    assert config.informed_extraction_topk == 10
    assert config.informed_extraction_context_budget_tokens == 800
    assert config.fuzzy_threshold == 0.85
    assert config.enable_llm_resolution is True
    assert config.min_confidence == 0.55
    assert config.semantic_dedup_threshold == 0.85
    assert config.embedding_dim == 1536
    assert "lives_in" in config.single_valued_attributes


def test_memory_config_is_frozen() -> None:
    config = MemoryConfig()
    with pytest.raises(ValidationError):
        config.fuzzy_threshold = 0.5  # type: ignore[misc]
    assert config.fuzzy_threshold == 0.85


def test_with_overrides_returns_a_new_config_and_leaves_the_original() -> None:
    config = MemoryConfig()
    changed = config.with_overrides({"fuzzy_threshold": 0.9, "enable_llm_resolution": False})
    assert (changed.fuzzy_threshold, changed.enable_llm_resolution) == (0.9, False)
    assert (config.fuzzy_threshold, config.enable_llm_resolution) == (0.85, True)
    assert config.with_overrides(None) is config
    assert config.with_overrides({}) is config


@pytest.mark.parametrize(
    "overrides",
    [
        {"fuzzy_threshold": "high"},
        {"enable_informed_extraction": "yes"},
        {"informed_extraction_topk": 2.5},
        {"min_confidence": 1.5},
    ],
    ids=["str-for-float", "str-for-bool", "float-for-int", "out-of-range"],
)
def test_with_overrides_of_wrong_type_or_value_raises_config_error(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="config_overrides") as caught:
        MemoryConfig().with_overrides(overrides)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("key", ["no_such_setting", "embedding_dim"])
def test_with_overrides_warns_and_ignores_unknown_or_per_client_keys(key: str) -> None:
    config = MemoryConfig()
    with pytest.warns(UserWarning, match=key):
        changed = config.with_overrides({key: 64, "fuzzy_threshold": 0.7})
    assert changed.fuzzy_threshold == 0.7
    assert changed.embedding_dim == 1536


@pytest.mark.parametrize("kwargs", [{"fuzzy_threshold": 2.0}, {"no_such_setting": 1}], ids=["range", "unknown"])
def test_memory_config_with_bad_value_raises_config_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        MemoryConfig(**kwargs)


# --- memory_sdk.pipeline.post_extraction ----------------------------------------------------------------------


def _extraction(
    entities: list[ExtractedEntity],
    facts: Sequence[tuple[str, str]] = (),
    relations: Sequence[tuple[str, str, str]] = (),
    profiles: dict[str, str] | None = None,
) -> Extraction:
    return Extraction(
        entities=entities,
        facts=[ExtractedFact(subject=subject, text=text) for subject, text in facts],
        relations=[ExtractedRelation(source=s, target=t, type=kind) for s, t, kind in relations],
        updated_profiles=profiles or {},
    )


@pytest.mark.parametrize(("name", "language"), [("Mia", "it"), ("Ma", "fr"), ("Mi", "es"), ("Mia", "*")])
def test_a_possessive_that_is_also_a_name_is_a_name(name: str, language: str) -> None:
    """Only a lexicon's `speaker_labels` name the speaker, never its possessives: "Mia" is somebody."""
    extraction = _extraction([ExtractedEntity(name=name, type="person")], facts=[(name, f"{name} works at Acme")])
    result = canonicalise(extraction, "Rafael", language)
    assert [f.subject for f in result.facts] == [name]


def test_canonicalise_groups_aliases_into_the_canonical_entity() -> None:
    extraction = _extraction(
        [
            ExtractedEntity(name="Guilherme Maturana", type="person", aliases=["Guili"]),
            ExtractedEntity(name="Guili", type="person"),
        ],
        facts=[("Guili", "Guili works at Acme")],
        relations=[("Guili", "Acme", "works at")],
        profiles={"Guili": "A friend of Rafael."},
    )
    result = canonicalise(extraction, "Rafael")
    guilherme = next(e for e in result.entities if e.name == "Guilherme Maturana")
    assert guilherme.aliases == ["Guili"]
    assert [e.name for e in result.entities].count("Guili") == 0
    assert [f.subject for f in result.facts] == ["Guilherme Maturana"]
    assert [(r.source, r.target, r.type) for r in result.relations] == [("Guilherme Maturana", "Acme", "works_at")]
    assert result.updated_profiles == {"Guilherme Maturana": "A friend of Rafael."}


@pytest.mark.parametrize(
    ("pronoun", "language"),
    [
        *((word, "*") for word in ("I", "me", "my", "myself", "eu", "Eu", "mim", "meu", "minha", "ich", "je", "yo")),
        *(("User", code) for code in ("en", "de", "")),  # the schema's label
        ("ich", "de"),
        ("I", "de"),  # the prompt is English: "I" for a German message
        ("je", "fr"),
        ("moi", "fr"),
        ("yo", "es"),
        ("io", "it"),
        ("eu", "pt"),
        ("eu", ""),  # no language detected
        ("eu", "en"),  # DESIGN.md: the speaker's pronouns in any message
    ],
)
def test_canonicalise_maps_speaker_pronouns_to_the_speaker(pronoun: str, language: str) -> None:
    extraction = _extraction(
        [ExtractedEntity(name=pronoun, type="concept"), ExtractedEntity(name="Acme", type="organization")],
        facts=[(pronoun, "Rafael works at Acme")],
        relations=[(pronoun, "Acme", "works_at")],
    )
    result = canonicalise(extraction, "Rafael", language)
    assert {(e.name, e.type) for e in result.entities} == {("Rafael", "person"), ("Acme", "organization")}
    rafael = next(e for e in result.entities if e.name == "Rafael")
    assert rafael.aliases == []  # a pronoun never becomes an alias
    assert [f.subject for f in result.facts] == ["Rafael"]
    assert [(r.source, r.target) for r in result.relations] == [("Rafael", "Acme")]


def test_canonicalise_keeps_a_bare_relationship_word_apart_from_the_speaker() -> None:
    result = canonicalise(
        _extraction([ExtractedEntity(name="mom", type="person")], facts=[("mom", "mom cooks")]), "Rafael"
    )
    [subject] = [f.subject for f in result.facts]
    assert subject != "Rafael"
    assert (subject, "person") in {(e.name, e.type) for e in result.entities}
    # The speaker is there only as the relative's owner: the kin relation, never the fact's subject.
    assert [(r.source, r.type, r.target) for r in result.relations] == [(subject, "parent_of", "Rafael")]


def test_canonicalise_drops_identity_and_self_relations() -> None:
    extraction = _extraction(
        [ExtractedEntity(name="Guilherme Maturana", type="person", aliases=["Guili"])],
        relations=[
            ("Guili", "Guilherme Maturana", "same_as"),
            ("Guili", "Guilherme Maturana", "knows"),  # self-relation once the alias is resolved
            ("Rafael", "Rafael", "likes"),
            ("Rafael", "Guili", "Same As"),
            ("Rafael", "Guili", "friend of"),
        ],
    )
    result = canonicalise(extraction, "Rafael")
    assert [(r.source, r.target, r.type) for r in result.relations] == [("Rafael", "Guilherme Maturana", "friend_of")]


def test_canonicalise_lowercases_entity_types() -> None:
    result = canonicalise(
        _extraction(
            [ExtractedEntity(name="Acme", type="ORGANIZATION"), ExtractedEntity(name="Lisboa", type=" Place ")]
        ),
        "Rafael",
    )
    assert {(e.name, e.type) for e in result.entities} == {("Acme", "organization"), ("Lisboa", "place")}


def test_canonicalise_strips_a_descriptive_hint_and_forces_person() -> None:
    extraction = _extraction(
        [ExtractedEntity(name="Carol (namorada do Rafael)", type="concept")],
        facts=[("Carol (namorada do Rafael)", "Carol likes tea")],
        relations=[("Rafael", "Carol (namorada do Rafael)", "dates")],
    )
    result = canonicalise(extraction, "Rafael")
    assert ("Carol", "person") in {(e.name, e.type) for e in result.entities}
    assert all("(" not in e.name for e in result.entities)
    assert [f.subject for f in result.facts] == ["Carol"]
    assert [(r.source, r.target) for r in result.relations] == [("Rafael", "Carol")]


def test_canonicalise_makes_an_entity_for_a_subject_no_entity_names() -> None:
    result = canonicalise(_extraction([], facts=[("Rafael", "Rafael likes jazz"), ("Jazz", "Jazz is old")]), "Rafael")
    assert {(e.name, e.type) for e in result.entities} == {("Rafael", "person"), ("Jazz", "concept")}


def test_plan_mirror_facts_adds_one_fact_per_unsupported_relation() -> None:
    facts = [ExtractedFact(subject="Clara", text="Clara joined Orion Tech")]
    relations = [
        ExtractedRelation(source="Clara", target="Orion Tech", type="works_at"),  # supported by the fact
        ExtractedRelation(source="Thiago", target="Clara", type="hired"),
        ExtractedRelation(source="Thiago", target="Clara", type="hired"),  # the first mirror supports it
    ]
    mirrors = plan_mirror_facts(facts, relations)
    assert [(m.subject, m.text) for m in mirrors] == [("Thiago", "Thiago hired Clara")]
    assert mirrors[0].confidence == MIRROR_CONFIDENCE == 0.60
    assert mirrors[0].importance_category == "relationship_change"


def test_plan_mirror_facts_matches_names_without_case_or_accents() -> None:
    facts = [ExtractedFact(subject="joão", text="JOAO mora em sao paulo")]
    relations = [ExtractedRelation(source="João", target="São Paulo", type="lives_in")]
    assert plan_mirror_facts(facts, relations) == []


def test_plan_mirror_facts_writes_the_relation_type_in_words() -> None:
    [mirror] = plan_mirror_facts([], [ExtractedRelation(source="Ana", target="Acme", type="former_employee_of")])
    assert mirror.text == "Ana former employee of Acme"


def test_near_duplicate_check_is_bounded_for_thousands_of_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    vectors = [[rng.gauss(0, 1) for _ in range(16)] for _ in range(3000)]
    dots = 0
    dot = post_extraction._dot

    def counted(a: Any, b: Any) -> float:
        nonlocal dots
        dots += 1
        return dot(a, b)

    monkeypatch.setattr(post_extraction, "_dot", counted)
    kept = drop_near_duplicates(vectors, 0.999)  # random directions: (almost) none is a near-duplicate
    assert len(kept) > 2900
    # One norm per vector and at most NEAR_DUPLICATE_WINDOW comparisons each (every pair would be 4.5 million);
    # counted, not timed: a timed bound failed on a slow machine (1.69 s against 1.5).
    assert len(vectors) < dots <= len(vectors) * (1 + NEAR_DUPLICATE_WINDOW)


def test_drop_near_duplicates_keeps_the_first_of_similar_vectors() -> None:
    a, a_close, b = [1.0, 0.0, 0.0], [0.99, 0.1, 0.0], [0.0, 1.0, 0.0]
    assert cosine(a, a_close) > 0.85
    assert drop_near_duplicates([a, b, a_close, None, None], 0.85) == {0, 1, 3, 4}


def test_drop_near_duplicates_threshold_is_strict() -> None:
    assert drop_near_duplicates([[1.0, 0.0], [1.0, 0.0]], 1.0) == {0, 1}
    assert drop_near_duplicates([[1.0, 0.0], [1.0, 0.0]], 0.99) == {0}
    assert drop_near_duplicates([], 0.85) == set()


def test_drop_near_duplicates_compares_only_against_kept_vectors() -> None:
    # c is close to b but not to a; b is dropped as a near-duplicate of a, so c stays.
    a, b, c = [1.0, 0.0], [0.9, 0.44], [0.6, 0.8]
    assert cosine(a, b) > 0.85 and cosine(b, c) > 0.85 and cosine(a, c) <= 0.85
    assert drop_near_duplicates([a, b, c], 0.85) == {0, 2}


def test_drop_near_duplicates_keeps_a_close_vector_that_distinct_calls_another_fact() -> None:
    same = [1.0, 0.0]
    assert drop_near_duplicates([same, same, same], 0.85, distinct=lambda i, j: i == 1) == {0, 1}


@pytest.mark.parametrize(
    ("text", "other", "more"),
    [
        # fr-allergies: two allergies said in one sentence are two facts, however close their vectors
        ("Benoît est allergique aux fruits de mer", "Benoît est allergique aux arachides", True),
        ("Ana does not work at Globex", "Ana works at Globex", True),  # the negation word is the message's
        ("Jon lost his banking job", "Jon lost his job as a banker yesterday", False),  # no word of the message more
        ("Jon lost his job as a banker", "Jon lost his job as a banker yesterday", False),
        ("Jon verlor gestern seinen Job als Banker", "Jon verlor seinen Job als Banker", True),
    ],
)
def test_says_more_is_a_word_of_the_message_the_other_fact_lacks(text: str, other: str, more: bool) -> None:
    message = {
        "Benoît": "Je suis allergique aux arachides et aux fruits de mer.",
        "Ana": "I don't work at Globex, I do not work at Globex anymore.",
        "Jon lost": "Lost my job as a banker yesterday, so I'm gonna start my own business.",
        "Jon verlor": "Ich habe gestern meinen Job als Banker verloren.",
    }
    said = next(words for start, words in message.items() if text.startswith(start))
    assert says_more(text, other, said) is more


def test_two_facts_by_their_evidence_or_a_word_said() -> None:
    message = "Toco violão nos fins de semana e meu aniversário é dia 14 de março."
    guitar = ExtractedFact(
        subject="Rafael", text="Rafael plays guitar on weekends", evidence="Toco violão nos fins de semana"
    )
    birthday = ExtractedFact(
        subject="Rafael", text="Rafael's birthday is on March 14", evidence="meu aniversário é dia 14 de março"
    )
    assert two_facts(birthday, guitar, message)  # each from its own words of the message
    banker = "Lost my job as a banker yesterday"
    first = ExtractedFact(subject="Jon", text="Jon lost his job as a banker yesterday", evidence=banker)
    again = ExtractedFact(subject="Jon", text="Jon lost his banking job", evidence=banker)
    assert not two_facts(again, first, banker + ", so I'm gonna start my own business.")  # a weak model's restatement
    unspanned = ExtractedFact(subject="Jon", text="Jon lost his banking job")
    assert not two_facts(unspanned, first, banker)


@pytest.mark.parametrize(
    ("text", "attribute", "entities", "refused"),
    [
        ("Rafael mora em Curitiba", "lives_in", [("Curitiba", "place")], False),
        ("Tom works at Starbucks on Saturdays", "employer", [("Starbucks", "organization")], False),
        ("Anna arbeitet bei der Deutschen Bahn", "employer", [("Deutsche Bahn", "organization")], False),
        ("Jon wants a dance studio", "job_title", [("Dancing", "concept")], False),  # no named value expected
        ("Jon is off to go swimming with the kids", "lives_in", [], True),  # LoCoMo conv-30, 1.5B model
        ("Jon lives with Gina", "lives_in", [("Gina", "person")], True),
        # LoCoMo conv-30 with the 1.5B model: an entity of no definite kind is no home
        ("Jon has been into dancing since he was a kid", "lives_in", [("Dancing", "concept")], True),
        ("Jon has been into dancing since he was a kid", "employer", [("dancing", "activity")], True),
    ],
)
def test_a_single_valued_attribute_needs_a_named_value_of_a_definite_kind(
    text: str, attribute: str, entities: list[tuple[str, str]], refused: bool
) -> None:
    subject = text.split()[0]
    answer = [ExtractedEntity(name=subject, type="person"), *(ExtractedEntity(name=n, type=t) for n, t in entities)]
    types = {normalise_alias(e.name): e.type for e in answer}
    fact = ExtractedFact(subject=subject, text=text, attribute=attribute)
    why = refused_attribute(fact, answer, types, DEFAULT_SINGLE_VALUED_ATTRIBUTES)
    assert (why is not None) is refused, why


# --- memory_sdk.pipeline.pre_retrieval.fit_to_budget ----------------------------------------------------------


def _item(text: str, relevance: float, tokens: int) -> ContextItem:
    return ContextItem(entity_key="person:ana", kind="fact", text=text, relevance=relevance, tokens=tokens)


def test_fit_to_budget_keeps_the_most_relevant_first() -> None:
    low, high, mid = _item("low", 0.1, 10), _item("high", 0.9, 10), _item("mid", 0.5, 10)
    assert fit_to_budget([low, high, mid], 20) == [high, mid]


def test_fit_to_budget_skips_an_item_too_big_but_keeps_smaller_ones_after_it() -> None:
    big, small = _item("big", 0.9, 50), _item("small", 0.5, 5)
    assert fit_to_budget([big, small], 10) == [small]


def test_fit_to_budget_never_exceeds_the_budget() -> None:
    items = [_item(str(i), i / 10, 7) for i in range(10)]
    for budget in (0, 6, 7, 20, 70, 1000):
        kept = fit_to_budget(items, budget)
        assert sum(i.tokens for i in kept) <= budget
    assert fit_to_budget(items, 70) == sorted(items, key=lambda i: i.relevance, reverse=True)
    assert fit_to_budget(items, 0) == []


# --- memory_sdk.pipeline.upsert.choose_evidence ---------------------------------------------------------------


def _prepared(text: str, confidence: float) -> PreparedFact:
    return PreparedFact(
        subject_name="Clara",
        entity_key="person:clara",
        text=text,
        attribute=None,
        single_valued=False,
        confidence=confidence,
        importance=0.9,
        importance_category="relationship_change",
        valid_from=datetime(2025, 6, 15, tzinfo=UTC),
        action_hint="NEW",
        source_context="extracted",
        embedding=None,
        prompt_version=None,
    )


def test_choose_evidence_picks_the_highest_confidence_fact_naming_both() -> None:
    weak, strong, one_name = uuid4(), uuid4(), uuid4()
    facts = [
        (_prepared("Clara works at Orion Tech, maybe", 0.6), weak),
        (_prepared("CLARA joined orion tech", 0.95), strong),
        (_prepared("Clara is happy", 0.99), one_name),
    ]
    assert choose_evidence("Clara", "Orion Tech", facts) == strong


def test_choose_evidence_is_none_when_no_fact_names_both() -> None:
    facts = [(_prepared("Clara is happy", 0.99), uuid4())]
    assert choose_evidence("Clara", "Orion Tech", facts) is None
    assert choose_evidence("Clara", "Orion Tech", []) is None


def test_choose_evidence_ignores_names_shorter_than_three_letters() -> None:
    facts = [(_prepared("Jo met Clara", 0.9), uuid4())]
    assert choose_evidence("Jo", "Clara", facts) is None


# --- memory_sdk.testing ---------------------------------------------------------------------------------------

_MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Ana loves jazz"}]


async def _ask(llm: ScriptedLLM, purpose: Any, schema: type[BaseModel] = EntityScanResponse) -> str:
    result = await llm.complete(purpose=purpose, messages=_MESSAGES, response_schema=schema)
    return result.text


async def test_scripted_llm_answers_each_purpose_from_its_queue_in_order() -> None:
    llm = ScriptedLLM({"entity_scan": [{"n": 1}, {"n": 2}], "fact_extraction": [{"facts": []}]})
    assert json.loads(await _ask(llm, "entity_scan")) == {"n": 1}
    assert json.loads(await _ask(llm, "fact_extraction")) == {"facts": []}
    assert json.loads(await _ask(llm, "entity_scan")) == {"n": 2}
    assert llm.remaining("entity_scan") == 0
    assert [r.purpose for r in llm.requests] == ["entity_scan", "fact_extraction", "entity_scan"]
    assert llm.requests[0].messages == tuple(_MESSAGES)
    assert llm.requests[0].response_schema is EntityScanResponse
    assert len(llm.requests_for("entity_scan")) == 2


async def test_scripted_llm_add_queues_more_answers() -> None:
    llm = ScriptedLLM()
    llm.add("entity_scan", {"n": 1}, {"n": 2})
    assert [json.loads(await _ask(llm, "entity_scan")) for _ in range(2)] == [{"n": 1}, {"n": 2}]


async def test_scripted_llm_function_responders_see_the_request_sync_or_async() -> None:
    async def slow(request: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"saw": request.messages[0]["content"]}

    llm = ScriptedLLM({"entity_scan": lambda request: {"purpose": request.purpose}, "fact_extraction": slow})
    assert json.loads(await _ask(llm, "entity_scan")) == {"purpose": "entity_scan"}
    assert json.loads(await _ask(llm, "entity_scan")) == {"purpose": "entity_scan"}  # never runs out
    assert json.loads(await _ask(llm, "fact_extraction")) == {"saw": "Ana loves jazz"}


async def test_scripted_llm_sends_str_verbatim_and_raises_exceptions() -> None:
    boom = RuntimeError("model down")
    llm = ScriptedLLM({"entity_scan": ["not json {", boom]})
    assert await _ask(llm, "entity_scan") == "not json {"
    with pytest.raises(RuntimeError) as caught:
        await _ask(llm, "entity_scan")
    assert caught.value is boom
    assert len(llm.requests) == 2  # a failed call is still recorded


async def test_scripted_llm_unscripted_purpose_error_names_the_purpose() -> None:
    llm = ScriptedLLM({"entity_scan": [{"entities": []}]})
    with pytest.raises(UnscriptedPurposeError, match="'reconciliation'"):
        await _ask(llm, "reconciliation")
    await _ask(llm, "entity_scan")
    with pytest.raises(UnscriptedPurposeError, match="'entity_scan'"):
        await _ask(llm, "entity_scan")  # its queue is used up


def test_scripted_llm_refuses_a_bare_response_as_a_script_entry() -> None:
    with pytest.raises(TypeError, match="entity_scan"):
        ScriptedLLM({"entity_scan": {"entities": []}})  # type: ignore[dict-item]


async def test_scripted_llm_reports_usage_from_text_sizes() -> None:
    llm = ScriptedLLM({"entity_scan": [{"entities": [{"name": "Ana"}]}]})
    result = await llm.complete(purpose="entity_scan", messages=_MESSAGES, response_schema=EntityScanResponse)
    assert result.usage is not None
    assert result.usage.input_tokens == estimate_tokens("Ana loves jazz")
    assert result.usage.output_tokens == estimate_tokens(result.text) > 0
    assert result.usage.total_tokens == result.usage.input_tokens + result.usage.output_tokens


async def test_hash_embedder_is_deterministic_normalised_and_sized() -> None:
    first, second = HashEmbedder(dimensions=64), HashEmbedder(dimensions=64)
    [a, b] = await first.embed(["Clara Rezende", "Clara Rezende"])
    assert a == b == second.embed_one("Clara Rezende")
    assert len(a) == first.dimensions == 64
    assert cosine(a, a) == pytest.approx(1.0)
    assert sum(x * x for x in a) == pytest.approx(1.0)
    assert first.calls == [["Clara Rezende", "Clara Rezende"]]


def test_hash_embedder_similarity_tracks_shared_names() -> None:
    embedder = HashEmbedder()

    def sim(x: str, y: str) -> float:
        return cosine(embedder.embed_one(x), embedder.embed_one(y))

    carol = sim("Carol", "Carolina")
    unrelated = [sim("Carol", other) for other in ("Orion Tech", "Thiago Nogueira", "Curitiba", "jazz")]
    assert carol > 0.5
    assert max(unrelated) < 0.2
    assert sim("Carolina", "carolina") == pytest.approx(1.0)  # case-folded
    assert sim("São Paulo", "Sao Paulo") == pytest.approx(1.0)  # accent-folded


def test_hash_embedder_overrides_pin_exact_texts() -> None:
    embedder = HashEmbedder(dimensions=8, overrides={"x": [3.0, 4.0, 0, 0, 0, 0, 0, 0]})
    assert embedder.embed_one("x") == [0.6, 0.8, 0, 0, 0, 0, 0, 0]
    assert embedder.embed_one("y") != embedder.embed_one("x")


def test_hash_embedder_refuses_tiny_dimensions() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        HashEmbedder(dimensions=4)


def test_negation_is_found_in_english_portuguese_and_spanish_without_the_portuguese_no() -> None:
    for text in (
        "Rafael não trabalha mais na Acme",
        "Ana isn't working at Globex anymore",
        "Ana no longer works there",
        "Ya no vive en Lima",
        "não conhece ninguém",  # stacked negations still negate
    ):
        assert denied(text), text
    for text in ("Rafael mora no Rio", "Ana nada bem", "Ana works at Globex", "Ana ainda trabalha na Acme"):
        assert not denied(text), text
