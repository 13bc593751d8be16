"""The snippets of the documentation site (docs/**/*.md) run as written, as the README's do (tests/test_readme.py).

What a snippet is, said in the docs themselves:
- A ```python block is a complete program: it runs in a fresh interpreter, the OpenAI defaults pointed at a local
  chat-completions server and MEMORY_SDK_DATABASE_URL at the test database, and exits 0 with no traceback.
- A block whose first line is `# fragment` (`# fragment: inside an async function, with `memory` open`) is the body
  of an async function: it runs with `memory` bound to an open MemoryClient (memory_sdk.testing's ScriptedLLM and
  HashEmbedder) on a memory where user_123 wrote REMEMBERED; any other name it uses, it imports or defines.
- `# fragment: compile only (why)` is only compiled: for the few that need what the tests do not have (Flask, an
  OpenTelemetry collector).
- `<!-- ci: run -->` on the line before a shell block (sh, bash, console) marks commands a reader runs offline: the
  `$ ` lines (every line of a block with none), comments skipped, each run with bash in a temporary directory,
  stdin closed, the venv's `memory-sdk` on PATH and MEMORY_SDK_DATABASE_URL at a copy of that memory; each exits 0.
  Shell blocks that need a model, the network or a superuser stay unmarked.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryClient
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.store.database import to_async_url
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE, each_fact, extraction
from tests.test_readme import child_env, run_program

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.MULTILINE | re.DOTALL)
FRAGMENT = "# fragment"
COMPILE_ONLY = "# fragment: compile only"
RUN_MARKER = "<!-- ci: run -->"
SHELLS = ("sh", "bash", "console")
# Marked shell blocks today: cli.md's demo and replayed write, import-export.md's export and restore, mcp.md's server
# (on a closed stdin it starts, then stops).
MARKED_AT_LEAST = 3

# What user_123 has written in the memory the fragments and the marked commands get: the messages the snippets
# talk about, each with the extraction the scripted model answers for it.
REMEMBERED = (
    ("Moro em Curitiba", datetime(2025, 1, 10, tzinfo=UTC), extraction(("Rafael", "Rafael mora em Curitiba"))),
    (CLARA_MESSAGE, datetime(2025, 3, 1, tzinfo=UTC), CLARA_EXTRACTION),
)
ANSWERS = {message: answer for message, _, answer in REMEMBERED} | {
    "Me mudei pra São Paulo": extraction(("Rafael", "Rafael mora em São Paulo"))
}
_MESSAGE = re.compile(r"^Message:\n<<<\n(.*)\n>>>", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Snippet:
    page: str  # relative to docs/
    line: int  # of the opening fence
    lang: str
    code: str
    marker: str  # the line before the fence, stripped

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        if self.lang == "python":
            first = self.code.partition("\n")[0]
            if first.startswith(COMPILE_ONLY):
                return "compile only"
            return "fragment" if first.startswith(FRAGMENT) else "program"
        return "shell" if self.marker == RUN_MARKER else "other"

    def commands(self) -> list[str]:
        lines = [line for line in self.code.splitlines() if line.strip()]
        prompted = [line.removeprefix("$ ") for line in lines if line.startswith("$ ")]
        return [line for line in prompted or lines if not line.lstrip().startswith("#")]


def snippets(kind: str | None = None) -> list[Snippet]:
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        page = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(page):
            before = page[: match.start()].rstrip("\n").rpartition("\n")[2]
            found.append(
                Snippet(
                    page=path.relative_to(DOCS).as_posix(),
                    line=page.count("\n", 0, match.start()) + 1,
                    lang=match["lang"],
                    code=textwrap.dedent(match["body"]),
                    marker=before.strip(),
                )
            )
    return [snippet for snippet in found if kind is None or snippet.kind == kind]


def scripted_model() -> ScriptedLLM:
    """The model of the fragments' memory: ANSWERS by message (no facts for any other), new facts added."""

    def extract(request: LLMRequest) -> dict[str, Any]:
        found = _MESSAGE.search(request.messages[-1]["content"])
        return ANSWERS.get(found[1] if found else "", {"entities": [], "facts": [], "relations": []})

    return ScriptedLLM(
        {
            "informed_extraction": extract,
            "reconciliation": lambda request: {"action": "ADD"},
            "reconciliation_batch": each_fact({"action": "ADD"}),
            "profile_consolidation": lambda request: {"profile": "Lives in Curitiba."},
        }
    )


async def on_server(database_url: str, statement: str) -> None:
    engine = create_async_engine(to_async_url(database_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


def named(database_url: str, name: str) -> str:
    return make_url(database_url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
async def remembered(database_url: str) -> AsyncIterator[str]:
    """A database where user_123 wrote REMEMBERED: the template each snippet gets a copy of."""
    name = f"docs_memory_{uuid.uuid4().hex[:12]}"
    await on_server(database_url, f'CREATE DATABASE "{name}"')
    async with MemoryClient(named(database_url, name), llm=scripted_model(), embedder=HashEmbedder()) as memory:
        for message, occurred_at, _ in REMEMBERED:
            result = await memory.write("user_123", message, speaker_name="Rafael", occurred_at=occurred_at)
            assert result.success and result.facts_added, result.error
    yield name
    await on_server(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def memory_url(database_url: str, remembered: str) -> AsyncIterator[str]:
    """A copy of the remembered memory for one snippet, dropped after it: no snippet sees another's writes."""
    name = f"docs_copy_{uuid.uuid4().hex[:12]}"
    await on_server(database_url, f'CREATE DATABASE "{name}" TEMPLATE "{remembered}"')
    yield named(database_url, name)
    await on_server(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_docs_have_the_snippets_this_test_knows() -> None:
    kinds = [snippet.kind for snippet in snippets()]
    assert kinds.count("program") >= 2 and kinds.count("fragment") >= 8
    assert kinds.count("shell") >= MARKED_AT_LEAST, "a `<!-- ci: run -->` marker was lost"
    assert kinds.count("compile only") <= 3, "compile-only is for the few snippets that cannot run"


def test_every_snippet_convention_is_described_in_this_docstring() -> None:
    doc = __doc__ or ""
    for convention in (FRAGMENT, COMPILE_ONLY, RUN_MARKER):
        assert convention in doc
    for snippet in snippets("compile only"):
        assert re.match(re.escape(COMPILE_ONLY) + r" \(.+\)$", snippet.code.partition("\n")[0]), f"{snippet}: why?"
    for snippet in snippets("shell"):
        assert snippet.lang in SHELLS and snippet.commands(), f"{snippet}: {RUN_MARKER} marks a shell block"
    pages = [path.read_text(encoding="utf-8") for path in DOCS.rglob("*.md")]
    unknown = {marker for page in pages for marker in re.findall(r"<!-- ci:.*?-->", page)}
    assert unknown <= {RUN_MARKER}, f"markers this module does not describe: {unknown}"


@pytest.mark.parametrize("snippet", snippets("program"), ids=str)
def test_docs_programs_run(snippet: Snippet, database_url: str, tmp_path: Path) -> None:
    _, asked = run_program(snippet.code, database_url, tmp_path)
    if ".write(" in snippet.code:  # through the OpenAI client, to the database
        assert asked >= 1


@pytest.mark.parametrize("snippet", snippets("fragment"), ids=str)
async def test_docs_fragments_run(snippet: Snippet, memory_url: str) -> None:
    # Top-level await, as in `python -m asyncio`: the fragment is the body of a coroutine, its lines the page's.
    code = compile("\n" * snippet.line + snippet.code, snippet.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    async with MemoryClient(memory_url, llm=scripted_model(), embedder=HashEmbedder()) as memory:
        running = eval(code, {"__name__": "__docs__", "memory": memory})
        if running is not None:
            await running


@pytest.mark.parametrize("snippet", snippets("compile only"), ids=str)
def test_docs_compile_only_fragments_compile(snippet: Snippet) -> None:
    compile(snippet.code, snippet.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("snippet", snippets("shell"), ids=str)
def test_docs_marked_shell_commands_run(snippet: Snippet, memory_url: str, tmp_path: Path) -> None:
    env = child_env(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        MEMORY_SDK_DATABASE_URL=memory_url,
        MEMORY_SDK_DATA_DIR=str(tmp_path / "unused"),
    )
    for command in snippet.commands():
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", command],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,  # a command that waits for input fails instead of hanging
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"$ {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
