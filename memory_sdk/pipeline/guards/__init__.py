"""Guards between what a model answered and what the SDK stores: pure functions, plain values in and out.

Small models make the same few mistakes (measured with a 1.5B model, issues 10 and 13): facts taken from the
recent messages or the known memory instead of the current message, one person's words given to another, and
reconciliation verdicts that close a true fact about something else. The pipeline asks for the right answer in
its prompts; these checks make a wrong one harmless. What a guard may do is docs/write-pipeline.md, "The guard
contract": drop what the message does not say, make a decision safer, refuse a single-valued attribute that names
no value, and never rewrite a fact; the stages record every change as an adjustment on the result.

One module per concern:
- `grounding` (post-extraction): a fact is kept only when it comes from the current message (`ground_fact`), an
  entity only when the message, the recent messages or the known memory name it (`ground_entities`), a mirror fact
  only when the message names both ends of its relation (`relation_named_in`) and their types fit it
  (`mirror_allowed`).
- `memory` (extraction, post-extraction): a fact the informed extraction copied from the known memory it was
  shown is none of the message's (`memory_copy`, `copied_from_memory`, `all_from_memory`).
- `decisions` (reconciliation): an UPDATE, DELETE or NOOP only touches a fact about the same thing, and an
  inferred fact never supersedes a stated one (`guard_decision`, `untouchable`, `shares_a_topic`), one answer gives a
  single-valued attribute one value per subject and moment (`one_value_per_moment`); the informed
  extraction's target names a fact it was shown, of the fact's own subject, among the fact's candidates
  (`informed_target`).
- `attributes`: the single-valued attribute a fact's text shows in words (`inferred_attribute`), read by
  `shares_a_topic`.
- `names`: what the others read with: the forms that name an entity (`Name`, `names_of`), a text's word n-grams
  and kinship phrases (`Grams`), its content words, whether it speaks in the first person.

Every name is imported from here: `from memory_sdk.pipeline.guards import ground_fact`.
"""

from memory_sdk.pipeline.guards.attributes import _ATTRIBUTE_PATTERNS as _ATTRIBUTE_PATTERNS
from memory_sdk.pipeline.guards.attributes import _past_habit as _past_habit
from memory_sdk.pipeline.guards.attributes import _titled as _titled
from memory_sdk.pipeline.guards.attributes import inferred_attribute
from memory_sdk.pipeline.guards.decisions import (
    STATED_CONFIDENCE,
    VALUE_CHECKED,
    Candidate,
    guard_decision,
    informed_target,
    one_value_per_moment,
    says_the_opposite,
    shares_a_topic,
)
from memory_sdk.pipeline.guards.decisions import _name_topics as _name_topics
from memory_sdk.pipeline.guards.decisions import _topics as _topics
from memory_sdk.pipeline.guards.decisions import untouchable as untouchable
from memory_sdk.pipeline.guards.grounding import (
    ENTITY_FUZZY_MIN_CHARS,
    ENTITY_MIN_SCORE,
    EVIDENCE_MIN_CHARS,
    EVIDENCE_MIN_SCORE,
    VAGUE_TYPES,
    Grounding,
    evidence_score,
    ground_entities,
    ground_fact,
    mirror_allowed,
    relation_named_in,
    source_sentence,
)
from memory_sdk.pipeline.guards.grounding import _overlap as _overlap
from memory_sdk.pipeline.guards.memory import Known, all_from_memory, copied_from_memory, memory_copy
from memory_sdk.pipeline.guards.names import _FIRST_PERSON as _FIRST_PERSON
from memory_sdk.pipeline.guards.names import _STOPWORDS as _STOPWORDS
from memory_sdk.pipeline.guards.names import Grams as Grams
from memory_sdk.pipeline.guards.names import Name, names_of, names_subject
from memory_sdk.pipeline.guards.names import _content_words as _content_words
from memory_sdk.pipeline.guards.names import _first_person as _first_person
from memory_sdk.pipeline.guards.names import _grams as _grams
from memory_sdk.pipeline.guards.names import _has_relation_word as _has_relation_word
from memory_sdk.pipeline.guards.names import _is_relation_word as _is_relation_word
from memory_sdk.pipeline.guards.names import _joined_content_words as _joined_content_words
from memory_sdk.pipeline.guards.names import _joined_grams as _joined_grams
from memory_sdk.pipeline.guards.names import _relative_form as _relative_form
from memory_sdk.pipeline.guards.names import _text_words as _text_words

__all__ = [
    "ENTITY_FUZZY_MIN_CHARS",
    "ENTITY_MIN_SCORE",
    "EVIDENCE_MIN_CHARS",
    "EVIDENCE_MIN_SCORE",
    "STATED_CONFIDENCE",
    "VAGUE_TYPES",
    "VALUE_CHECKED",
    "Candidate",
    "Grounding",
    "Known",
    "Name",
    "all_from_memory",
    "copied_from_memory",
    "evidence_score",
    "ground_entities",
    "ground_fact",
    "guard_decision",
    "inferred_attribute",
    "informed_target",
    "memory_copy",
    "mirror_allowed",
    "names_of",
    "names_subject",
    "one_value_per_moment",
    "relation_named_in",
    "says_the_opposite",
    "shares_a_topic",
    "source_sentence",
]
