"""Decisions (reconciliation): what an UPDATE, DELETE or NOOP may touch, whoever decided it.

Under the guard contract (docs/write-pipeline.md, "The guard contract") these guards may only make a decision
safer: an UPDATE, DELETE or NOOP whose target is not about the same thing or says the opposite becomes an ADD, an
inferred fact confirms (NOOP) or stands beside (ADD) the stated fact it would end (`guard_decision`,
`untouchable`), and the informed extraction's target counts only when it is a fact it was shown, of the same
subject, among the fact's candidates (`informed_target`). They never turn an ADD into an UPDATE or an UPDATE into
a DELETE, and never rewrite a fact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from rapidfuzz import fuzz

from memory_sdk.pipeline.guards.attributes import inferred_attribute
from memory_sdk.pipeline.guards.names import _STOPWORDS
from memory_sdk.pipeline.state import CHAT_LINE_CONTEXT, MIRROR_CONTEXT, FactDecision, PreparedFact, ShownFact
from memory_sdk.text import normalise_alias, short_text_cache

# The single-valued attributes whose value the SDK checks (post_extraction.refused_attribute: the fact names a
# place or an organisation of the answer). Any other attribute is the model's word alone, so it lets a decision
# touch a fact below the similarity floor only for these.
VALUE_CHECKED = frozenset({"lives_in", "employer"})
# A fact at or above this confidence is stated (the prompts: 0.95 stated, 0.8 strongly implied); below it, or
# built by the SDK from a relation, it is inferred.
STATED_CONFIDENCE = 0.9
_EXTRACTED = "extracted"


# Two words are the same topic when their first letters agree: "guitar" and "guitarra", "namorando" and "namoro".
_TOPIC_PREFIX = 4


@dataclass(frozen=True)
class Candidate:
    """A current fact of the subject that a new fact may relate to."""

    id: UUID
    text: str
    similarity: float
    attribute: str | None
    valid_from: datetime
    source_context: str = _EXTRACTED
    confidence: float = 0.95


def guard_decision(
    decision: FactDecision,
    candidates: Sequence[Candidate],
    *,
    min_similarity: float,
    same_above: float,
    negated: Callable[[str], bool] = lambda _text: False,
    close_above: float = 0.0,
    value_floor: float = 0.0,
    second_answer: bool = False,
) -> FactDecision:
    """The decision, or what it must become so that it cannot corrupt memory; the reason says which guard.

    - UPDATE, DELETE and NOOP touch only a fact about the same thing: the same text, the same attribute when
      both carry one, else a similarity of at least `min_similarity`; otherwise the fact is ADDed. (Candidates are
      the subject's own facts by construction, so the subject is always the same);
    - a shared attribute whose value the SDK does not check (anything but VALUE_CHECKED: the model's word alone)
      counts only at a similarity of at least `value_floor` (the embedder's `attribute_min_similarity`); below
      it the fact is not about the attribute's open value, so it is stored without the attribute, which would end
      that value whatever the decision. Measured with the 1.5B model on LoCoMo: "Gina launched an ad campaign for
      her clothing store" as `job_title` closed "Gina is a dancer" (0.41 with the local embedder);
    - an UPDATE never replaces a fact the SDK made (a mirror of a relation, a chat line kept as said): neither holds
      a value a new fact could replace. Measured on LoCoMo: the reconciliation call UPDATEd "John friend of Maria"
      and "Maria spouse of John" into "John thanks Maria for her encouragement". Its DELETE and NOOP stand;
    - an UPDATE, DELETE or NOOP decided on the texts alone (no attribute shared) needs a similarity of at least
      `close_above` too (the embedder's `closure_min_similarity`): a closure loses a true fact and a NOOP the new
      one, so both need the two facts to be about the same thing in the embedder's own scale;
    - an inferred fact (one below STATED_CONFIDENCE) never ends a stated fact of higher confidence, and a mirror
      fact (built by the SDK from a relation) or a chat line kept as written (fact_checks.chat_line) never ends
      any fact: it confirms it (NOOP) when it says the same (similarity above `same_above`, or the same
      single-valued attribute, which an ADD would end too), else it is ADDed beside it. A mirror says only that a
      relation holds: measured with the 1.5B model on LoCoMo, "John spouse of Maria" closed "John friend of
      Maria", and "Calvin lives in park" closed "Calvin lives in Japan", which had closed "Calvin lives in city";
      a chat line is no statement about its subject ("Wow, they look great! Can't wait to see them rock the
      festival" closed "They're the ones performing at the festival!");
    - a NOOP whose fact says the opposite of its target (`negated`: the message language's negation, lexicons) is
      ADDed: "Rafael não trabalha mais na Acme" confirms nothing of "Rafael trabalha na Acme";
    - a fact of a `second_answer` (the extraction asked again without the known memory, because the first answer
      only repeated it) UPDATEs a fact only through a shared attribute; on the texts alone its UPDATE is an ADD.
      The model that answered memory back once restates it again, and its reconciliation calls such a restatement
      an UPDATE: measured with the 1.5B model on LoCoMo sessions 1-2 of conv-30 and conv-50, 9 of the 13 closed
      versions ("Jon is passionate about dancing" by "Jon wants to go to a dance class") came from a second answer,
      all UPDATEs, none a change. Its DELETE stands: the demo's "Não trabalho mais na Acme" is a retraction that
      only the second answer gave, and a restatement is no retraction.

    Every rule makes a decision safer (it touches less) and never the reverse: no rule turns an ADD into an UPDATE,
    or an UPDATE into a DELETE (docs/write-pipeline.md, "The guard contract").
    """
    decision = _same_thing(decision, candidates, min_similarity, negated, value_floor)
    decision = _unchecked_value_apart(decision, candidates, value_floor)
    decision = _close_only_the_same(decision, candidates, close_above)
    if second_answer:
        decision = _second_answer_updates_less(decision, candidates)
    decision = _weaker_keeps_out(decision, candidates, same_above)
    return _no_value_to_replace(decision, candidates)


def one_value_per_moment(decisions: Sequence[FactDecision]) -> list[FactDecision]:
    """The decisions, with a single-valued attribute left on one fact only of those of one subject that give it at
    one moment (the same `valid_from`): the most confident, the last of them on a tie. The others are stored
    without it, and an UPDATE that only the attribute made (`single_valued_fallback`) is the model's ADD again.

    The database keeps one open value per attribute, so each of such facts would end the one before it at its own
    start: a version that was never true. One message gives one value of a single-valued attribute at one moment;
    the later statement is the newer ("Não trabalho mais na Acme. Agora estou na Orion Tech."), and a guess never
    holds the value over a statement. The others are kept as the model said them, without the attribute. Measured
    with the 1.5B model on LoCoMo: "Deborah has a goal of keeping teaching yoga" and "Deborah is passionate about
    helping people find peace" were both `job_title`, and the second closed the first in the same write. Facts of
    one answer at different moments ("was a teacher until 2019", "is a nurse") keep their attributes: the earlier
    one gets a real history.
    """
    moments = [_moment(decision.fact) for decision in decisions]
    keeper: dict[tuple[str, str, datetime], int] = {}
    for index, (decision, moment) in enumerate(zip(decisions, moments, strict=True)):
        best = None if moment is None else keeper.get(moment)
        if moment is not None and (best is None or decision.fact.confidence >= decisions[best].fact.confidence):
            keeper[moment] = index
    kept = []
    for index, (decision, moment) in enumerate(zip(decisions, moments, strict=True)):
        if moment is None or keeper[moment] == index:
            kept.append(decision)
            continue
        if decision.single_valued_fallback:
            decision = replace(decision, action="ADD", target_id=None, single_valued_fallback=False)
        attribute = decision.fact.attribute
        why = f"guard: {attribute} refused, another fact of the answer gives its value at the same moment"
        kept.append(_without_attribute(decision, why))
    return kept


def _moment(fact: PreparedFact) -> tuple[str, str, datetime] | None:
    """The subject, single-valued attribute and start a fact gives a value at; None without such an attribute."""
    if not (fact.single_valued and fact.attribute):
        return None
    return fact.entity_key, fact.attribute, fact.valid_from


def _without_attribute(decision: FactDecision, why: str) -> FactDecision:
    """The decision on its fact stored without its attribute (its text as the model gave it), `why` in the reason."""
    plain = replace(decision.fact, attribute=None, single_valued=False)
    return replace(decision, fact=plain, reason=f"{why}; {decision.action}")


def _second_answer_updates_less(decision: FactDecision, candidates: Sequence[Candidate]) -> FactDecision:
    target = _target(decision, candidates)
    if decision.action != "UPDATE" or target is None:
        return decision
    if decision.fact.attribute and decision.fact.attribute == target.attribute:
        return decision
    why = f"a second answer (asked without memory) UPDATEs a fact only through its attribute: {target.text!r} stays"
    return replace(decision, action="ADD", target_id=None, reason=f"guard: UPDATE refused, {why}; ADD")


# The SDK's own facts (pipeline.state): a mirror says only that a relation holds, a chat line only what was said.
_NO_VALUE = frozenset({MIRROR_CONTEXT, CHAT_LINE_CONTEXT})


def _no_value_to_replace(decision: FactDecision, candidates: Sequence[Candidate]) -> FactDecision:
    target = _target(decision, candidates)
    if decision.action != "UPDATE" or target is None or target.source_context not in _NO_VALUE:
        return decision
    why = f"target {target.text!r} is the SDK's own ({target.source_context}), no value a new fact replaces"
    return replace(decision, action="ADD", target_id=None, reason=f"guard: UPDATE refused, {why}; ADD")


def _unchecked_value_apart(decision: FactDecision, candidates: Sequence[Candidate], floor: float) -> FactDecision:
    """Without its attribute, the fact of an unchecked single-valued attribute that is not about the open value:
    stored with it, the fact would end that value (the database keeps one) whatever the decision."""
    fact = decision.fact
    if not (fact.single_valued and fact.attribute):
        return decision
    open_value = next((c for c in candidates if c.attribute == fact.attribute), None)
    if open_value is None or open_value.id == decision.target_id:
        return decision
    if _attribute_counts(fact.attribute, open_value.similarity, floor):
        return decision
    if normalise_alias(fact.text) == normalise_alias(open_value.text):
        return decision
    why = (
        f"guard: {fact.attribute} refused, the fact is not about the open value {open_value.text!r} (similarity "
        f"{open_value.similarity:.2f} < {floor:.2f}) and the SDK does not check a {fact.attribute} value"
    )
    return _without_attribute(decision, why)


def _attribute_counts(attribute: str, similarity: float, value_floor: float) -> bool:
    """Whether a shared `attribute` makes two facts about the same thing: always when the SDK checks its value
    (VALUE_CHECKED), else at a similarity of at least `value_floor`."""
    return attribute in VALUE_CHECKED or similarity >= value_floor


def _close_only_the_same(decision: FactDecision, candidates: Sequence[Candidate], floor: float) -> FactDecision:
    target = _target(decision, candidates)
    if decision.action not in ("UPDATE", "DELETE", "NOOP") or target is None or target.similarity >= floor:
        return decision
    fact = decision.fact
    if normalise_alias(fact.text) == normalise_alias(target.text):
        return decision
    if fact.attribute and fact.attribute == target.attribute:
        return decision
    why = f"target {target.text!r} is not about the same thing (similarity {target.similarity:.2f} < {floor:.2f})"
    return replace(decision, action="ADD", target_id=None, reason=f"guard: {decision.action} refused, {why}; ADD")


def _target(decision: FactDecision, candidates: Sequence[Candidate]) -> Candidate | None:
    return next((c for c in candidates if c.id == decision.target_id), None)


# rapidfuzz token_set_ratio (0-100) at which two texts say the same words but for a negation.
OPPOSITE_RATIO = 85.0


def says_the_opposite(text: str, other: str, negated: Callable[[str], bool]) -> bool:
    """True when one text is the other negated: the same words (OPPOSITE_RATIO) but one reads as negated, "Rafael
    não trabalha mais na Acme" against "Rafael trabalha na Acme". Such a pair is never the same fact (measured with
    the 1.5B model: the informed call answered NOOP for exactly this pair and left the ended job current). Texts in
    other words are the model's to judge: "Ilaria non rinuncia mai alla nuotata" restates "Ilaria nuota ogni
    mattina" (a NOOP a negation count would refuse). `negated` is the message language's rule
    (lexicons.Lexicon.is_negated); without a lexicon nothing reads as negated."""
    if negated(text) == negated(other):
        return False
    return fuzz.token_set_ratio(normalise_alias(text), normalise_alias(other)) >= OPPOSITE_RATIO


def _same_thing(
    decision: FactDecision,
    candidates: Sequence[Candidate],
    floor: float,
    negated: Callable[[str], bool],
    value_floor: float,
) -> FactDecision:
    target = _target(decision, candidates)
    if decision.action == "ADD" or target is None:
        return decision
    fact = decision.fact
    if decision.action == "NOOP" and says_the_opposite(fact.text, target.text, negated):
        opposite = f"{fact.text!r} says the opposite of {target.text!r}"
        return replace(decision, action="ADD", target_id=None, reason=f"guard: NOOP refused, {opposite}; ADD")
    why = untouchable(fact, target, floor, value_floor)
    if why is None:
        return decision
    return replace(decision, action="ADD", target_id=None, reason=f"guard: {decision.action} refused, {why}; ADD")


def untouchable(fact: PreparedFact, target: Candidate, floor: float, value_floor: float = 0.0) -> str | None:
    """Why no UPDATE, DELETE or NOOP of `fact` may touch `target` (then `guard_decision` makes it an ADD), or None
    when one may: the same text, the same attribute when both carry one (for an attribute whose value the SDK
    does not check, VALUE_CHECKED, with a similarity of at least `value_floor` too), else a similarity of at least
    `floor` and a shared topic (`shares_a_topic`).

    Reconciliation asks no LLM about a fact whose every similar candidate is untouchable: whatever the answer, the
    fact would be ADDed (measured with the 1.5B model: a mirror fact's only similar candidates were facts it could
    not touch, and the call it cost was one of melanie_caroline's 1.3 calls per write).
    """
    if normalise_alias(fact.text) == normalise_alias(target.text):
        return None
    if fact.attribute and target.attribute:
        if fact.attribute != target.attribute:
            return f"target {target.text!r} is about {target.attribute}, the fact about {fact.attribute}"
        if _attribute_counts(fact.attribute, target.similarity, value_floor):
            return None
        return (
            f"target {target.text!r} shares {fact.attribute} but not what it is about (similarity "
            f"{target.similarity:.2f} < {value_floor:.2f}), and the SDK does not check a {fact.attribute} value"
        )
    if target.similarity < floor:
        return f"target {target.text!r} is not about the same thing (similarity {target.similarity:.2f} < {floor:.2f})"
    if not shares_a_topic(fact.text, target.text, fact.subject_name):
        return f"target {target.text!r} shares no word with the fact beyond its subject"
    return None


def shares_a_topic(text: str, other: str, subject: str) -> bool:
    """Whether two facts of one subject share a word beyond the subject's name (3+ letters, not a function word,
    compared by their first 4 letters: "PhD" in "started a PhD in Lisbon" and "Julia's PhD is in Porto", "guitar"
    and "guitarra", "namorando" and "namoro"), or say the same attribute in words (`inferred_attribute`: "moved to
    Austin", "lives in São Paulo").

    Similarity alone does not say two facts are about the same thing: facts of one subject embed close because they
    share its name. The 1.5B model's reconciliation UPDATEd "Melanie's mom came to stay with us last week" into
    "Melanie's mom is a painter" (similarity 0.61 with the local embedder), and the visit was closed.
    """
    said, said_other = inferred_attribute(text, None), inferred_attribute(other, None)
    if said is not None and said_other is not None and said[0] == said_other[0]:
        return True  # "moved to Austin" and "lives in São Paulo": both say where the subject lives
    name = _name_topics(subject)
    return not (_topics(text) - name).isdisjoint(_topics(other) - name)


@short_text_cache(maxsize=4096)
def _topics(text: str) -> frozenset[str]:
    """The first _TOPIC_PREFIX letters of each content word of `text` (3+ letters, not a function word). Memoised:
    reconciliation compares each fact with each of its candidates, and the candidates recur from write to write."""
    return frozenset(
        word[:_TOPIC_PREFIX] for word in normalise_alias(text).split() if len(word) >= 3 and word not in _STOPWORDS
    )


@short_text_cache(maxsize=1024)
def _name_topics(subject: str) -> frozenset[str]:
    """The topics a subject's own name gives every fact about it (and "s" of "Melanie's"): they say nothing."""
    return frozenset(word[:_TOPIC_PREFIX] for word in {*normalise_alias(subject).split(), "s"})


def _weaker_keeps_out(decision: FactDecision, candidates: Sequence[Candidate], same_above: float) -> FactDecision:
    fact = decision.fact
    if decision.action == "NOOP" or (fact.source_context == _EXTRACTED and fact.confidence >= STATED_CONFIDENCE):
        return decision
    open_value = next((c for c in candidates if fact.single_valued and c.attribute == fact.attribute), None)
    target = _target(decision, candidates) if decision.action in ("UPDATE", "DELETE") else None
    not_extracted = fact.source_context != _EXTRACTED  # a mirror fact or a chat line
    stronger = [
        c
        for c in (target, open_value)
        if c is not None and (not_extracted or (_stated(c) and c.confidence > fact.confidence))
    ]
    if not stronger:
        return decision
    kept = stronger[0]
    ends = "any fact" if not_extracted else "the stated"
    why = (
        f"guard: {decision.action} refused, an inferred fact ({fact.source_context}, confidence "
        f"{fact.confidence:.2f}) never ends {ends} {kept.text!r} ({kept.confidence:.2f})"
    )
    if kept is open_value or kept.similarity > same_above:
        return replace(decision, action="NOOP", target_id=kept.id, similarity=kept.similarity, reason=f"{why}; NOOP")
    return replace(decision, action="ADD", target_id=None, reason=f"{why}; ADD")


def _stated(candidate: Candidate) -> bool:
    return candidate.source_context == _EXTRACTED and candidate.confidence >= STATED_CONFIDENCE


def informed_target(
    target: str | None, entity_key: str, shown: Mapping[str, ShownFact], candidates: Sequence[Candidate]
) -> Candidate | str:
    """The candidate an informed decision's short id names, or why it names none the fact may touch.

    The informed call sees the known facts of every entity a message names, so its id may be one it was never
    shown, or a fact about someone else (a 1.5B model puts one speaker's words on another: issue 13); and a fact it
    saw may be none of the new fact's candidates (not among its nearest), which `guard_decision` could not judge.
    """
    short = (target or "").strip().lstrip("[#").rstrip("]")
    seen = shown.get(short)
    if seen is None:
        return f"target {target!r} is not an id the informed call was shown"
    if seen.entity_key != entity_key:
        return f"target {short} {seen.text!r} is about {seen.entity_key}, the fact about {entity_key}"
    found = next((c for c in candidates if c.id == seen.id), None)
    if found is None:
        return f"target {short} {seen.text!r} is not among the fact's candidates"
    return found
