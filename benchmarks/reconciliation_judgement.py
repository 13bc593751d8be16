"""How a model judges one new fact against memory: the reconciliation prompt alone, on labelled pairs.

    python benchmarks/reconciliation_judgement.py --base-url http://127.0.0.1:8088/v1 \
        --model qwen2.5-coder-1.5b-instruct [--prompt PATH]

Each pair of `reconciliation_pairs/pairs.json` is a subject, the facts memory holds about it, a new fact and the
right action (ADD, UPDATE, DELETE, NOOP) with its target. The pairs where ADD is right come from the wrong closures
the 1.5B model made on LoCoMo and the truth corpus; the others are plain changes, a retraction and a restatement.
Each is asked twice through `OpenAIProvider`, with each of the two hints the pipeline gives ("new", "the message
changes something already known"), as `pipeline/reconciliation.py` renders it. `--prompt PATH` asks a variant of
`prompts/reconciliation.md` instead of the shipped one, so a prompt change is measured before it ships.

It prints every answer and a table: per right action, how many answers were right, and how many answers would
have closed a true fact (an UPDATE or DELETE where ADD or NOOP is right). No guard runs here: this is the model's
judgement alone, which the guards of `guards/decisions.py` then bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import format_table
from truth import real_model

from memory_sdk.llm.prompts import ReconciliationContext, load_prompt, read_prompt
from memory_sdk.llm.schemas import ReconciliationResponse

PAIRS = Path(__file__).parent / "reconciliation_pairs" / "pairs.json"
HINTS = ("new", "the message changes something already known")  # pipeline/reconciliation.py, _hint
DATE = "2023-06-01"
SINCE = "2023-05-01"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--prompt", type=Path, default=None, help="a variant of prompts/reconciliation.md")
    return parser.parse_args(argv)


def right(pair: dict[str, Any], answer: ReconciliationResponse) -> bool:
    if answer.action != pair["expect"]:
        return False
    return pair["expect"] == "ADD" or str(answer.target) == str(pair.get("target"))


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    prompt = load_prompt("reconciliation") if args.prompt is None else read_prompt("reconciliation", args.prompt)
    llm, label = real_model(args)
    pairs = json.loads(PAIRS.read_text(encoding="utf-8"))
    asked: Counter[str] = Counter()
    good: Counter[str] = Counter()
    closed: Counter[str] = Counter()
    for pair in pairs:
        existing = "\n".join(f"{n}. {text} (true since {SINCE})" for n, text in enumerate(pair["existing"], start=1))
        for hint in HINTS:
            context = ReconciliationContext(
                subject=pair["subject"], hint=hint, candidates=existing, new_fact_date=DATE, new_fact=pair["new"]
            )
            result = await llm.complete(
                purpose="reconciliation", messages=prompt.render(context), response_schema=ReconciliationResponse
            )
            answer = ReconciliationResponse.model_validate_json(result.text)
            expect = pair["expect"]
            asked[expect] += 1
            good[expect] += right(pair, answer)
            closed[expect] += expect in ("ADD", "NOOP") and answer.action in ("UPDATE", "DELETE")
            mark = "ok " if right(pair, answer) else "BAD"
            print(f"{mark} {expect:6} <- {answer.action} {answer.target}  [{hint[:3]}]  {pair['new']}", flush=True)
    rows = [[action, asked[action], good[action], closed[action]] for action in ("ADD", "UPDATE", "DELETE", "NOOP")]
    rows.append(["total", sum(asked.values()), sum(good.values()), sum(closed.values())])
    print(f"\n{label}, prompt {prompt.version}" + (f" ({args.prompt.name})" if args.prompt else ""))
    print(format_table(["right action", "answers", "right", "closed a true fact"], rows))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
