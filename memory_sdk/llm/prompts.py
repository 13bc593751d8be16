"""Prompt templates: one file per purpose in `prompts/`, shipped inside the wheel as `memory_sdk/prompts`.

A file is a small header (`version: N`) and `## system` / `## user` sections with `$placeholders`
(string.Template, so JSON examples keep their braces). Each purpose has a typed context model; a placeholder the
model does not define, or a field the template never uses, fails when the prompt loads, not at call time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from memory_sdk.errors import ConfigError
from memory_sdk.llm.protocols import ChatMessage, Purpose

__all__ = [
    "EntityResolutionContext",
    "EntityScanContext",
    "FactExtractionContext",
    "InformedExtractionContext",
    "ProfileConsolidationContext",
    "PromptTemplate",
    "ReconciliationBatchContext",
    "ReconciliationContext",
    "RelationExtractionContext",
    "load_prompt",
    "prompts_dir",
    "read_prompt",
]


class _Context(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InformedExtractionContext(_Context):
    speaker: str
    occurred_at: str
    existing_context: str
    recent_messages: str
    message: str


class EntityScanContext(_Context):
    speaker: str
    occurred_at: str
    recent_messages: str
    message: str


class FactExtractionContext(_Context):
    speaker: str
    occurred_at: str
    entities: str
    recent_messages: str
    message: str


class RelationExtractionContext(_Context):
    speaker: str
    entities: str
    message: str
    retry_note: str


class EntityResolutionContext(_Context):
    speaker: str
    message: str
    name: str
    entity_type: str
    candidates: str


class ReconciliationContext(_Context):
    subject: str
    hint: str
    candidates: str
    new_fact_date: str
    new_fact: str


class ReconciliationBatchContext(_Context):
    facts: str


class ProfileConsolidationContext(_Context):
    name: str
    entity_type: str
    facts: str


Context = TypeVar("Context", bound=_Context)

_CONTEXT_MODELS: dict[str, type[_Context]] = {
    "informed_extraction": InformedExtractionContext,
    "entity_scan": EntityScanContext,
    "fact_extraction": FactExtractionContext,
    "relation_extraction": RelationExtractionContext,
    "reconciliation": ReconciliationContext,
    "reconciliation_batch": ReconciliationBatchContext,
    "entity_resolution": EntityResolutionContext,
    "profile_consolidation": ProfileConsolidationContext,
}

_HEADER = re.compile(r"\A---\n(?P<header>.*?)\n---\n", re.DOTALL)
_SECTION = re.compile(r"^## (system|user)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class PromptTemplate(Generic[Context]):
    """A loaded prompt: `render(context)` gives the chat messages; `version` names it in stored facts."""

    purpose: Purpose
    version: str
    system: Template
    user: Template
    context_model: type[Context]

    def render(self, context: Context) -> list[ChatMessage]:
        if not isinstance(context, self.context_model):
            raise TypeError(f"{self.purpose} prompt needs {self.context_model.__name__}")
        values = context.model_dump()
        return [
            {"role": "system", "content": self.system.substitute(values)},
            {"role": "user", "content": self.user.substitute(values)},
        ]


def prompts_dir() -> Path:
    """Where the prompt files are: inside the installed package, or `prompts/` of a source checkout."""
    packaged = Path(str(resources.files("memory_sdk"))) / "prompts"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "prompts"


@cache
def load_prompt(purpose: Purpose) -> PromptTemplate[_Context]:
    """Load and check the template of `purpose` (cached: files are read once per process)."""
    return read_prompt(purpose, prompts_dir() / f"{purpose}.md")


def read_prompt(purpose: Purpose, path: Path) -> PromptTemplate[_Context]:
    """Load and check the template of `purpose` from `path`: the shipped file, or a variant to measure
    (benchmarks/reconciliation_judgement.py)."""
    context_model = _CONTEXT_MODELS.get(purpose)
    if context_model is None:
        raise ConfigError(f"no prompt template is defined for purpose {purpose!r}")
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"prompt file for {purpose!r} not found at {path}") from exc
    header = _HEADER.match(raw)
    if header is None:
        raise ConfigError(f"{path}: missing '---' header with 'version: N'")
    fields = dict(line.split(":", 1) for line in header.group("header").splitlines() if ":" in line)
    version = fields.get("version", "").strip()
    if not version:
        raise ConfigError(f"{path}: header has no version")
    parts = _SECTION.split(raw[header.end() :])
    sections = {name: body.strip() + "\n" for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    if set(sections) != {"system", "user"}:
        raise ConfigError(f"{path}: needs exactly one '## system' and one '## user' section")
    system, user = Template(sections["system"]), Template(sections["user"])
    used = {name for template in (system, user) for name in template.get_identifiers()}
    expected = set(context_model.model_fields)
    if used != expected:
        raise ConfigError(
            f"{path}: placeholders {sorted(used)} do not match {context_model.__name__} fields {sorted(expected)}"
        )
    if not (system.is_valid() and user.is_valid()):
        raise ConfigError(f"{path}: a '$' that is not a placeholder must be written '$$'")
    return PromptTemplate(
        purpose=purpose,
        version=f"{purpose}/v{version}",
        system=system,
        user=user,
        context_model=context_model,
    )
