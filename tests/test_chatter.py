"""Chatter is logged but not extracted: no LLM call, no fact; anything with content is extracted as usual."""

from __future__ import annotations

import pytest

from memory_sdk.chatter import is_chatter
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import extraction


@pytest.mark.parametrize(
    "message",
    [
        "bom dia",
        "Bom dia!!",
        "kkkkk",
        "rsrs",
        "ok",
        "Valeu, obrigado!",
        "good morning btw",
        "haha lol",
        "👍",
        "¡Hola! Buenos días",
        "Bom dia, gente!",  # the truth benchmark's Camila, with the 1.5B model: "Camila: Bom dia, gente!" stored
        "hi all, good morning everyone",
        "jajaja gracias",
        "tchau, até logo",
        "hey",
        "...",
        # the chat benchmark with the 1.5B model: "Hey Jon! Long time. How have you been?" (a name: not chatter)
        # ran an informed call to its output cap, then three blind calls
        "Hey! Long time. How have you been?",
        "Oi, tudo bem? Como vai você?",
        "what's up",
    ],
)
def test_greetings_thanks_and_laughter_are_chatter(message: str) -> None:
    assert is_chatter(message)


@pytest.mark.parametrize(
    "message",
    [
        "Bom dia! Me mudei pra São Paulo",
        "Hey Mel!",
        "Bom dia, gente! A Ana casou",
        "ok, moro em Curitiba",
        "kkk a Ana casou",
        "thanks Caroline",
        "good morning from Lisbon",
        "Adoro jazz",
        "How long have you been at Acme?",
        "Long time no see! I moved to Porto",
    ],
)
def test_a_message_with_anything_else_is_not_chatter(message: str) -> None:
    assert not is_chatter(message)


@pytest.mark.parametrize("message", ["sim", "não", "yes", "haha sim", "verdade kkk", "Yeah!"])
def test_an_answer_is_chatter_only_when_no_question_comes_before(message: str) -> None:
    """The 1.5B model made "haha sim", with no recent messages, the fact "Beatriz said 'haha sim'"."""
    assert is_chatter(message)
    assert is_chatter(message, ["Ana: Eu adoro jazz", "Bia: legal"])
    assert not is_chatter(message, ["Ana: bom dia", "Ana: Você tem cachorro?"])


@pytest.mark.integration
async def test_chatter_is_logged_without_an_llm_call(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [extraction(("Rafael", "Rafael mora em Curitiba"))]})
    async with make_client(llm) as memory:
        chatter = await memory.write(agent_id, "bom dia kkk", "Rafael", verbose=True)
        content = await memory.write(agent_id, "Bom dia! Moro em Curitiba", "Rafael")
        events = await memory.get_events(agent_id)
    assert chatter.success and chatter.llm_calls == 0 and not chatter.facts_added
    assert chatter.pipeline is not None and chatter.pipeline.step("extraction").data["chatter"] is True
    assert [f.text for f in content.facts_added] == ["Rafael mora em Curitiba"]
    assert [e.content for e in events] == ["bom dia kkk", "Bom dia! Moro em Curitiba"]
    assert len(llm.requests_for("informed_extraction")) == 1
