"""The README's Python blocks run as written: each complete program in a fresh interpreter (the OpenAI defaults
pointed at a local chat-completions server, the database at the test session's), the "Test your app" block under
pytest with no configuration of ours, and fragments (marked `# fragment`) at least compile."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.openai_server import FakeOpenAIServer, Reply
from tests.scripts import extraction

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
FRAGMENT = "# fragment"


def blocks(kind: str) -> list[str]:
    def kind_of(code: str) -> str:
        if code.startswith(FRAGMENT):
            return "fragment"
        return "pytest" if "\nasync def test_" in code else "program"

    return [code for code in BLOCKS if kind_of(code) == kind]


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **extra}
    for name in ("PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    return env


def test_the_readme_has_the_blocks_this_test_knows() -> None:
    assert len(blocks("program")) >= 3 and len(blocks("pytest")) == 1 and blocks("fragment")


@pytest.mark.parametrize("code", blocks("fragment"), ids=lambda code: code.splitlines()[1][:40])
def test_readme_fragments_compile(code: str) -> None:
    compile(code, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def run_program(code: str, database_url: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run a documented program in a fresh interpreter, its OpenAI defaults pointed at a scripted local server that
    answers two extractions and then ADDs: how it ended, and how many chat calls it made."""
    with FakeOpenAIServer() as server:
        answers = [
            extraction(("Rafael", "Rafael mora em Curitiba")),
            extraction(("Rafael", "Rafael se mudou pra São Paulo")),
        ]
        server.script_chat(*(Reply.chat(answer) for answer in answers))
        server.script_chat(*(Reply.chat({"action": "ADD"}) for _ in range(6)))
        env = child_env(
            OPENAI_API_KEY="test-key",
            OPENAI_BASE_URL=server.base_url,
            MEMORY_SDK_DATABASE_URL=database_url,
            MEMORY_SDK_DATA_DIR=str(tmp_path / "unused"),
        )
        script = tmp_path / "documented_program.py"
        script.write_text(code, encoding="utf-8")
        done = run([sys.executable, str(script)], env, tmp_path)
        asked = len(server.chat_requests)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return done, asked


@pytest.mark.parametrize("code", blocks("program"), ids=lambda code: code.splitlines()[0][:40])
def test_readme_programs_run(code: str, database_url: str, tmp_path: Path) -> None:
    done, asked = run_program(code, database_url, tmp_path)
    if "await memory.write(" in code:  # the example that writes: through the OpenAI client, to the database
        assert asked >= 2 and "Rafael" in done.stdout, done.stdout


def test_readme_test_example_passes_under_plain_pytest(tmp_path: Path) -> None:
    [code] = blocks("pytest")
    (tmp_path / "test_readme_example.py").write_text(code, encoding="utf-8")
    done = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], child_env(), tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
