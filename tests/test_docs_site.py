"""The API reference of the documentation site covers the public surface.

The reference pages (docs/reference/*.md) are mkdocstrings `::: dotted.path` directives; CI builds the site with
`mkdocs build --strict`, which fails on a directive that no longer resolves. These tests catch the other way round,
without building: a public name (`memory_sdk.__all__`, `memory_sdk.testing.__all__`) that no directive documents.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

import memory_sdk
import memory_sdk.testing

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference"
DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$", re.MULTILINE)
PUBLIC_MODULES: tuple[ModuleType, ...] = (memory_sdk, memory_sdk.testing)


def directives() -> list[str]:
    return [path for page in sorted(REFERENCE.glob("*.md")) for path in DIRECTIVE.findall(page.read_text())]


def resolve(dotted: str) -> object:
    """The object a directive documents: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def public_names() -> list[tuple[str, str]]:
    return [(module.__name__, name) for module in PUBLIC_MODULES for name in module.__all__]


def test_reference_pages_have_directives() -> None:
    assert len(directives()) >= len(public_names())


@pytest.mark.parametrize("dotted", directives())
def test_every_reference_directive_resolves(dotted: str) -> None:
    resolve(dotted)


@pytest.mark.parametrize(("module", "name"), public_names(), ids=lambda value: value)
def test_every_public_name_has_a_reference_entry(module: str, name: str) -> None:
    public = getattr(importlib.import_module(module), name)
    documented = [dotted for dotted in directives() if dotted.rsplit(".", 1)[-1] == name]
    assert any(resolve(dotted) is public for dotted in documented), (
        f"{module}.{name} is public but no `::: ...{name}` directive in docs/reference/*.md documents it"
    )
