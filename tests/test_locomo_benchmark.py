"""Smoke test: benchmarks/locomo.py runs on a tiny LoCoMo-shaped file with the scripted stand-in, scores it and
compares two of its --json files. The public LoCoMo data stays outside the repository: the one test that reads it
runs only where it is (../shared/data/locomo/ beside the repository), and skips elsewhere (CI)."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
BENCHMARKS = REPOSITORY / "benchmarks"
LOCOMO_DEV = REPOSITORY / "../shared/data/locomo/locomo-dev.json"  # data/locomo/README.md: never copied in here

pytestmark = pytest.mark.skipif(not (BENCHMARKS / "locomo.py").exists(), reason="benchmarks/ is not in this tree")

TINY = [
    {
        "sample_id": "conv-t",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! How are you?"},
                {
                    "speaker": "Ben",
                    "dia_id": "D1:2",
                    "text": "Hey Ana! I adopted a dog named Rex last week.",
                    "blip_caption": "a photo of a dog on a beach",
                },
                {"speaker": "Ana", "dia_id": "D1:3", "text": "That's lovely. I started working at a bakery in Lisbon."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "Do you like the job?"},
            ],
        },
        "observation": {
            "session_1_observation": {
                "Ben": [["Ben adopted a dog named Rex.", "D1:2"]],
                "Ana": [["Ana works at a bakery in Lisbon.", ["D1:3"]]],
            }
        },
        "qa": [{"question": "What is the name of Ben's dog?", "answer": "Rex", "evidence": ["D1:2"], "category": 4}],
    }
]


@pytest.fixture(scope="module")
def locomo() -> Iterator[ModuleType]:
    """The script as a module (it imports its helpers from benchmarks/_common.py and truth.py)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("locomo")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.integration
async def test_locomo_writes_scores_and_compares_a_tiny_conversation(
    locomo: ModuleType, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(TINY), encoding="utf-8")
    out_json = tmp_path / "run.json"
    argv = ["--data", str(data), "--conversations", "conv-t", "--sessions", "1"]
    argv += ["--embedder", "hash", "--scorer", "hash"]  # offline and fast: HashEmbedder for the memory and the scores
    report = await locomo.main([*argv, "--database-url", database_url, "--show-matches", "4", "--json", str(out_json)])
    captured = capsys.readouterr()
    out = captured.out
    assert "locomo: 1 conversations, sessions 1, 4 turns, 2 observations, 1 questions" in out
    # 4 writes, one fact each from the stand-in; the SDK drops "Ben: Do you like the job?" (a question): 3 current.
    assert re.search(r"^conv-t\s+4\s+\d/2 \d+%\s+3\s", out, re.MULTILINE), out
    assert re.search(r"^total\s+4\s", out, re.MULTILINE)
    for header in ("obs held", "junk", "ungrounded", "wrong spk", "closed (unrel)", "rel dates", "R@5 / R@10"):
        assert header in out
    # The stand-in's facts that are left: "Ana: Hi Ben!" is small talk, "Ben: I adopted a dog named Rex last week."
    # a verbatim copy of its turn.
    figures = report["total"]
    assert (figures["junk_small_talk"], figures["junk_question"], figures["junk_verbatim"]) == (1, 0, 1)
    assert (figures["ungrounded"], figures["wrong_speaker"], figures["closed"]) == (0, 0, 0)
    assert figures["writes"] == 4 and figures["failed_writes"] == 0 and figures["calls_per_write"] == 1.0
    assert figures["qa"] == 1 and figures["recall@10"] == 1.0  # the one fact of D1:2 is found for its question
    assert figures["baseline@10"] == 1.0  # four turns: the raw-turn baseline finds D1:2 in its top 10 too
    assert figures["adjustments_by_rule"]["question"] == 1
    assert "calls per write 1.00 (informed_extraction 4)" in out
    assert re.search(r"^adjustments to the model's answers: \d+ \(.*question 1", out, re.MULTILINE), out
    assert "observation/fact pairs nearest the threshold" in out
    assert "D1:4 (4/4): 1 calls" in captured.err  # progress, one line a write
    # "last week" moves the fact's valid_from off the turn's day: listed for a human to check.
    assert re.search(r"D1:2 2023-05-08 -> 2023-05-0\d Ben", out)
    saved = json.loads(out_json.read_text(encoding="utf-8"))
    assert saved["total"] == figures
    facts = saved["conversations"]["conv-t"]["facts"]
    assert len(facts) == 3 and all(f["dia_id"] for f in facts)
    # The turn with a photo was written with its caption.
    [dog] = [f for f in facts if f["dia_id"] == "D1:2"]
    assert "[shares a photo: a photo of a dog on a beach]" in dog["turn"]

    await locomo.main(["--compare", str(out_json), str(out_json)])
    out = capsys.readouterr().out
    assert re.search(r"^junk\s+2/3 67%\s+2/3 67%\s+\+0$", out, re.MULTILINE), out
    assert re.search(r"^QA recall@10\s+1\.00\s+1\.00\s+\+0$", out, re.MULTILINE), out


@pytest.mark.integration
async def test_locomo_replays_a_recorded_run_turn_by_turn(
    locomo: ModuleType, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--record saves the model's answers per turn; --replay answers each turn from them, with no model: the same
    memory, so a guard change can be measured on a slow model's answers in seconds."""
    data = tmp_path / "tiny.json"
    data.write_text(json.dumps(TINY), encoding="utf-8")
    recorded = tmp_path / "answers.json"
    argv = ["--data", str(data), "--conversations", "conv-t", "--sessions", "1", "--embedder", "hash"]
    argv += ["--scorer", "hash", "--database-url", database_url]
    first = await locomo.main([*argv, "--record", str(recorded)])
    calls = json.loads(recorded.read_text(encoding="utf-8"))["calls"]
    assert sorted({call["segment"] for call in calls}) == [f"conv-t D1:{n}" for n in range(1, 5)]
    again = await locomo.main([*argv, "--replay", str(recorded)])
    out = capsys.readouterr().out
    assert "replayed from answers.json" in out and "replay: 0 answers given to a prompt other than" in out
    for figure in ("current_facts", "junk", "observations_held", "recall@10", "calls_per_write"):
        assert again["total"][figure] == first["total"][figure], figure


def test_locomo_reads_dia_ids_however_the_data_spells_them(locomo: ModuleType) -> None:
    assert locomo.dia_ids("D1:3") == ("D1:3",)
    assert locomo.dia_ids(["D1:3", "D1:5"]) == ("D1:3", "D1:5")
    assert locomo.dia_ids("D26:14, D26:34") == ("D26:14", "D26:34")
    assert locomo.dia_ids("D") == () and locomo.dia_ids("D:11:26") == ()
    assert locomo.session_moment("4:04 pm on 20 January, 2023").isoformat() == "2023-01-20T16:04:00+00:00"


def test_locomo_junk_checks(locomo: ModuleType) -> None:
    names = ["Jon", "Gina"]
    assert locomo.is_question("Gina: What business are you thinking of?", names)
    assert locomo.is_question("Does Jon like dancing", names)
    assert locomo.is_question("Gina asks Jon what got him into dancing", names)
    assert not locomo.is_question("Jon is starting a dance studio", names)
    assert not locomo.is_question("When Jon was young he danced", names)
    assert not locomo.is_question("Gina: Can't wait to see them rock the festival.", names)  # conv-30 D1:27
    assert locomo.is_small_talk("Gina greets Jon", names)
    assert locomo.is_small_talk("Jon thanks Gina for her support", names)
    assert not locomo.is_small_talk("Gina congratulates Jon on opening his own dance studio", names)
    assert not locomo.is_small_talk("Jon lost his job as a banker", names)


@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason="the LoCoMo dev set is not beside this repository")
def test_locomo_reads_the_public_dev_set(locomo: ModuleType) -> None:
    [conversation] = locomo.load_data(LOCOMO_DEV, ["conv-30"], [1], captions=True)
    assert conversation.speakers == ("Jon", "Gina")
    assert len(conversation.turns) > 10 and conversation.turns[0].dia_id == "D1:1"
    assert conversation.turns[0].recent == () and len(conversation.turns[3].recent) == 3
    assert all(turn.at.date() == conversation.turns[0].at.date() for turn in conversation.turns)
    assert conversation.observations and all(o.dia_ids for o in conversation.observations)
    written = {turn.dia_id for turn in conversation.turns}
    assert conversation.questions and all(set(q.evidence) <= written for q in conversation.questions)
