"""The input guard at the door: every argument of the public API is checked here, before any I/O.

A caller's mistake must come back as InvalidInputError naming the argument, never as a driver error from deep in
a query, and a refused write must leave nothing behind. PostgreSQL text cannot hold NUL or lone surrogates
(UTF-8 has no encoding for them), and timestamptz cannot hold every Python datetime, so those are refused here
too. The limits are listed in docs/errors.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from numbers import Real
from typing import Any
from uuid import UUID

from memory_sdk.config import MemoryConfig
from memory_sdk.errors import InvalidInputError
from memory_sdk.pipeline.state import WriteRequest

__all__ = [
    "EARLIEST_MOMENT",
    "LATEST_MOMENT",
    "MAX_AGENT_ID_CHARS",
    "MAX_BUDGET_TOKENS",
    "MAX_ENTITY_TYPE_CHARS",
    "MAX_EVENTS_LIMIT",
    "MAX_MESSAGE_ID_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PARTICIPANTS",
    "MAX_QUERY_CHARS",
    "MAX_RECENT_MESSAGES",
    "MAX_SEARCH_K",
    "MAX_SPEAKER_NAME_CHARS",
    "MAX_STORED_COUNT",
    "MAX_STORED_JSON_DEPTH",
    "MAX_STORED_TEXT_CHARS",
    "check_agent",
    "check_budget",
    "check_confidence",
    "check_event_id",
    "check_flag",
    "check_k",
    "check_limit",
    "check_message_id",
    "check_moment",
    "check_name",
    "check_query",
    "check_stored_count",
    "check_stored_json",
    "check_stored_moment",
    "check_stored_share",
    "check_stored_text",
    "check_stored_uuid",
    "check_uuid",
    "validate_write",
]

MAX_AGENT_ID_CHARS = 255
MAX_MESSAGE_ID_CHARS = 255
# A display name; the longest real names are under 100 characters, and the speaker is put into every prompt.
MAX_SPEAKER_NAME_CHARS = 200
# An entity name, alias or key asked for by a read; keys are `{type}:{slug}` of a name, so this is generous.
MAX_NAME_CHARS = 1_000
# recent_messages are for pronouns, and the model sees only the last config.recent_messages_limit (5) of them;
# a thousand is no conversation window, it is a mistake (a whole history passed by accident).
MAX_RECENT_MESSAGES = 1_000
# A conversation's participants are compared with every person name of a write: a group chat, not a phone book.
MAX_PARTICIPANTS = 50
# search(k=...): a page of hits for a prompt or a screen; each signal reads max(k, 50) candidates (store/search.py).
MAX_SEARCH_K = 100
# A search query or the message context() is asked about: a chat message is far shorter; the limit keeps a whole
# document pasted by mistake from being embedded and parsed into thousands of OR-ed words.
MAX_QUERY_CHARS = 10_000
# context(budget_tokens=...): far past any model's context window, so a real budget is never refused.
MAX_BUDGET_TOKENS = 1_000_000
# get_events(limit=...): one page of the log; a whole log is limit=None.
MAX_EVENTS_LIMIT = 10_000
# Moments are stored as timestamptz. Python's year 1 and year 9999 overflow once moved to UTC, and year 1 UTC
# is stored by the driver as -infinity; a window of centuries around now holds every moment a chat can mention.
EARLIEST_MOMENT = datetime(1900, 1, 1, tzinfo=UTC)
LATEST_MOMENT = datetime(2200, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
# Stored values handed back to the SDK (restore's document, memory_sdk/export.py) are checked as strictly as
# arguments: an entity type is a word or two ("person", "organization"; the model is asked for at most 30
# characters), so 100 leaves room for what older versions stored and refuses a paragraph.
MAX_ENTITY_TYPE_CHARS = 100
# A stored counter or token count: PostgreSQL `integer`.
MAX_STORED_COUNT = 2**31 - 1
# A stored outcome or trace is a few levels deep (a trace's step, its calls, their details); far deeper is no
# outcome the SDK wrote, and walking it would exhaust Python's stack.
MAX_STORED_JSON_DEPTH = 64
# A string inside a stored outcome or trace (a fact's text, an error, a traced prompt): a prompt holds the message
# (max_message_chars, 32,000 by default) and the memory around it.
MAX_STORED_TEXT_CHARS = 1_000_000


def check_agent(agent_id: object) -> str:
    """The tenant id: a non-empty str that PostgreSQL can store (it is set on every transaction)."""
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidInputError(f"agent_id must be a non-empty string, got {_shown(agent_id)}")
    return _check_text("agent_id", agent_id, MAX_AGENT_ID_CHARS)


def check_name(name: str, value: object) -> str:
    """An entity name, alias or key given to a read."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {_shown(value)}")
    return _check_text(name, value, MAX_NAME_CHARS)


def check_message_id(message_id: object) -> str | None:
    """The caller's id of a message (idempotent writes): printable text, so it is the same id wherever it is shown."""
    if message_id is None:
        return None
    if not isinstance(message_id, str) or not message_id.strip() or len(message_id) > MAX_MESSAGE_ID_CHARS:
        raise InvalidInputError(f"message_id must be a non-empty str of at most {MAX_MESSAGE_ID_CHARS} characters")
    if not message_id.isprintable():  # NUL, control characters and lone surrogates are not printable
        raise InvalidInputError("message_id must be printable text (no NUL or control characters)")
    return message_id


def check_moment(name: str, moment: object) -> datetime | None:
    """A timezone-aware datetime within EARLIEST_MOMENT..LATEST_MOMENT, returned in UTC (None passes).

    A date or a string is refused rather than guessed at: which time zone a caller meant is theirs to say.
    """
    if moment is None:
        return None
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise InvalidInputError(
            f"{name} must be a timezone-aware datetime (e.g. datetime(..., tzinfo=UTC)), got {_shown(moment)}"
        )
    try:
        in_utc = moment.astimezone(UTC)
    except OverflowError:
        in_utc = None
    if in_utc is None or not EARLIEST_MOMENT <= in_utc <= LATEST_MOMENT:
        raise InvalidInputError(
            f"{name} must fall within the years {EARLIEST_MOMENT.year}..{LATEST_MOMENT.year} in UTC, got {moment!r}"
        )
    return in_utc


def check_limit(limit: object) -> int | None:
    """get_events' page size: None (everything) or an int in 1..MAX_EVENTS_LIMIT."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_EVENTS_LIMIT:
        raise InvalidInputError(f"limit must be None or an int from 1 to {MAX_EVENTS_LIMIT:,}, got {_shown(limit)}")
    return limit


def check_uuid(name: str, value: object) -> UUID:
    """An id argument: a UUID, or a str that parses as one (as the CLI and JSON output print them)."""
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise InvalidInputError(f"{name} must be a UUID or a UUID string, got {_shown(value)}")


def check_event_id(event_id: object) -> UUID:
    return check_uuid("event_id", event_id)


def check_confidence(min_confidence: object) -> float | None:
    """A confidence floor: None (the config's) or a real number in [0, 1]."""
    if min_confidence is None:
        return None
    if isinstance(min_confidence, Real) and not isinstance(min_confidence, bool):
        floor = float(min_confidence)
        if 0 <= floor <= 1:  # NaN fails every comparison
            return floor
    raise InvalidInputError(f"min_confidence must be a number from 0 to 1, got {_shown(min_confidence)}")


def check_query(name: str, query: object) -> str:
    """A search query or a context() message: a str with a word in it, at most MAX_QUERY_CHARS, storable text."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {_shown(query)}")
    return _check_text(name, query, MAX_QUERY_CHARS)


def check_k(k: object) -> int:
    """search()'s number of hits: an int in 1..MAX_SEARCH_K."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SEARCH_K:
        raise InvalidInputError(f"k must be an int from 1 to {MAX_SEARCH_K}, got {_shown(k)}")
    return k


def check_budget(budget_tokens: object) -> int:
    """context()'s token budget: an int in 1..MAX_BUDGET_TOKENS."""
    if (
        isinstance(budget_tokens, bool)
        or not isinstance(budget_tokens, int)
        or not 1 <= budget_tokens <= MAX_BUDGET_TOKENS
    ):
        raise InvalidInputError(
            f"budget_tokens must be an int from 1 to {MAX_BUDGET_TOKENS:,}, got {_shown(budget_tokens)}"
        )
    return budget_tokens


def check_flag(name: str, value: object) -> bool:
    """A switch: a bool, not a truthy stand-in ("no" is truthy)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {_shown(value)}")
    return value


def validate_write(
    agent_id: object,
    message: object,
    speaker_name: object,
    occurred_at: object,
    recent_messages: object,
    config: MemoryConfig,
    dry_run: object,
    verbose: object,
    message_id: object = None,
    participants: object = None,
    language: object = None,
) -> WriteRequest:
    """The write() arguments as a WriteRequest, or InvalidInputError before anything is stored.

    Only the last config.recent_messages_limit recent messages are kept: the model sees no more, and the alias
    check of post-extraction scans what is kept (2,000 messages of 10,000 characters took 80 s to scan).
    """
    agent = check_agent(agent_id)
    if not isinstance(message, str):
        raise InvalidInputError(f"message must be a str, got {type(message).__name__}")
    if len(message) > config.max_message_chars:
        raise InvalidInputError(
            f"message has {len(message)} characters, over max_message_chars={config.max_message_chars}; "
            "split it into several writes"
        )
    if not isinstance(speaker_name, str) or not speaker_name.strip():
        raise InvalidInputError(f"speaker_name must be a non-empty string, got {_shown(speaker_name)}")
    moment = check_moment("occurred_at", occurred_at)
    return WriteRequest(
        agent_id=agent,
        message=_check_text("message", message, config.max_message_chars),
        speaker_name=_check_text("speaker_name", speaker_name, MAX_SPEAKER_NAME_CHARS).strip(),
        occurred_at=moment or datetime.now(UTC),
        recent_messages=_recent_messages(recent_messages, config),
        dry_run=check_flag("dry_run", dry_run),
        verbose=check_flag("verbose", verbose),
        message_id=check_message_id(message_id),
        participants=_participants(participants),
        language=_language(language),
    )


_LANGUAGE = re.compile(r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?$")


def _language(language: object) -> str | None:
    """A language tag ("de", "pt-BR"), lowercased; None: detect it. A language with no lexicon is legal: then only
    the language-neutral rules run (memory_sdk/lexicons)."""
    if language is None:
        return None
    if not isinstance(language, str) or not _LANGUAGE.match(language):
        raise InvalidInputError(f"language must be a language tag such as 'de' or 'pt-BR', got {_shown(language)}")
    return language.lower().replace("_", "-")


def _participants(participants: object) -> tuple[str, ...]:
    """Each participant a non-blank name like speaker_name, at most MAX_PARTICIPANTS of them."""
    if participants is None:
        return ()
    if isinstance(participants, str) or not isinstance(participants, Sequence):
        raise InvalidInputError(f"participants must be a sequence of names, got {type(participants).__name__}")
    if len(participants) > MAX_PARTICIPANTS:
        raise InvalidInputError(f"participants has {len(participants)} names, over {MAX_PARTICIPANTS}")
    names = []
    for position, name in enumerate(participants):
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(f"participants[{position}] must be a non-empty string, got {_shown(name)}")
        names.append(_check_text(f"participants[{position}]", name, MAX_SPEAKER_NAME_CHARS).strip())
    return tuple(names)


def _recent_messages(recent: object, config: MemoryConfig) -> tuple[str, ...]:
    """Every item checked (count, type, size, encoding), then the last recent_messages_limit kept, NUL removed.

    NUL is removed rather than refused, unlike in the message: these are context copied from a chat history,
    not what gets stored as the event.
    """
    if recent is None:
        return ()
    if isinstance(recent, str) or not isinstance(recent, Sequence):
        raise InvalidInputError(f"recent_messages must be a sequence of str, got {type(recent).__name__}")
    if len(recent) > MAX_RECENT_MESSAGES:
        raise InvalidInputError(
            f"recent_messages has {len(recent):,} items, over {MAX_RECENT_MESSAGES:,}; the model sees only the "
            f"last {config.recent_messages_limit}, pass those"
        )
    for position, item in enumerate(recent):
        if not isinstance(item, str):
            raise InvalidInputError(f"recent_messages[{position}] must be a str, got {type(item).__name__}")
        _check_encodable(f"recent_messages[{position}]", item, config.max_message_chars)
    kept: Sequence[str] = recent[-config.recent_messages_limit :] if config.recent_messages_limit else ()
    return tuple(item.replace("\x00", "") for item in kept)


def check_stored_text(name: str, value: object, max_chars: int, *, blank: bool = False) -> str:
    """Stored text (restore): a str that PostgreSQL can hold, at most `max_chars`, and non-blank unless `blank`."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {_shown(value)}")
    if not blank and not value.strip():
        raise InvalidInputError(f"{name} must not be blank")
    return _check_text(name, value, max_chars)


def check_stored_uuid(name: str, value: object) -> UUID:
    """A stored id: a UUID string, as exports write them."""
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise InvalidInputError(f"{name} must be a UUID string, got {_shown(value)}")


def check_stored_moment(name: str, value: object) -> datetime:
    """A stored moment: an ISO 8601 string with a time zone, within the window check_moment accepts."""
    moment = None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            moment = None
    if moment is None or moment.utcoffset() is None:
        raise InvalidInputError(f"{name} must be an ISO 8601 moment with a time zone, got {_shown(value)}")
    checked = check_moment(name, moment)
    assert checked is not None
    return checked


def check_stored_count(name: str, value: object) -> int:
    """A stored counter, version or token count: an int (not a bool) from 0 to MAX_STORED_COUNT."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STORED_COUNT:
        raise InvalidInputError(f"{name} must be an int from 0 to {MAX_STORED_COUNT:,}, got {_shown(value)}")
    return value


def check_stored_share(name: str, value: object) -> float:
    """A stored confidence, importance or strength: a real number in [0, 1] (bool and NaN refused)."""
    if isinstance(value, Real) and not isinstance(value, bool) and 0 <= float(value) <= 1:
        return float(value)
    raise InvalidInputError(f"{name} must be a number from 0 to 1, got {_shown(value)}")


def check_stored_json(name: str, value: object) -> None:
    """A stored JSON value (jsonb): objects with string keys, lists, strings PostgreSQL can hold (no NUL, no lone
    surrogate), finite numbers, at most MAX_STORED_JSON_DEPTH levels. Walked without recursion."""
    pending: list[tuple[str, object, int]] = [(name, value, 1)]
    while pending:
        path, item, depth = pending.pop()
        if depth > MAX_STORED_JSON_DEPTH:
            raise InvalidInputError(f"{name} is nested deeper than {MAX_STORED_JSON_DEPTH} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"{path} has a key that is not a string: {_shown(key)}")
                _check_text(f"{path} key", key, MAX_QUERY_CHARS)
                pending.append((f"{path}.{key}", child, depth + 1))
        elif isinstance(item, list):
            pending.extend((f"{path}[{position}]", child, depth + 1) for position, child in enumerate(item))
        elif isinstance(item, str):
            _check_text(path, item, MAX_STORED_TEXT_CHARS)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInputError(f"{path} is {item}, which JSON cannot hold")
        elif item is not None and not isinstance(item, bool | int | float):
            raise InvalidInputError(f"{path} must be a JSON value, got {type(item).__name__}")


def _check_text(name: str, text: str, max_chars: int) -> str:
    """Text bound for PostgreSQL: at most `max_chars`, no NUL (text cannot hold it), encodable."""
    _check_encodable(name, text, max_chars)
    if "\x00" in text:
        raise InvalidInputError(
            f"{name} contains a NUL byte (at {text.index(chr(0))}), which PostgreSQL text cannot store"
        )
    return text


def _check_encodable(name: str, text: str, max_chars: int) -> None:
    """At most `max_chars`, and encodable as UTF-8: a lone surrogate would fail in the driver, mid-write."""
    if len(text) > max_chars:
        raise InvalidInputError(f"{name} has {len(text):,} characters, over the limit of {max_chars:,}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{name} contains a lone surrogate {text[exc.start]!r} (at {exc.start}), which is not valid Unicode "
            "text; decode your input with errors='replace' or fix its source"
        ) from exc


def _shown(value: Any) -> str:
    """A refused value in an error message: its repr, cut short, with its type."""
    shown = repr(value)
    return f"{shown[:60]}... ({type(value).__name__})" if len(shown) > 60 else f"{shown} ({type(value).__name__})"
