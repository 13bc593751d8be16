"""Time expressions (memory_sdk.timeexpr): the resolver as a table, the valid-time rule as pure cases, and the
stored valid_from end to end through write() with the scripted LLM."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from memory_sdk.testing import ScriptedLLM
from memory_sdk.timeexpr import Granularity, find_time_expressions, valid_time
from tests.conftest import ClientFactory
from tests.scripts import extraction

SUNDAY = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)  # Sunday, June 15, 2025
MONDAY = datetime(2025, 6, 16, 9, 0, tzinfo=UTC)
FRIDAY = datetime(2025, 6, 13, 18, 0, tzinfo=UTC)


def at(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, 12, 0, tzinfo=UTC)


# (text, occurred_at, the expression as written, the day, granularity, relative)
CASES: list[tuple[str, datetime, str, date, Granularity, bool]] = [
    # Portuguese
    ("Me mudei pra São Paulo ontem", SUNDAY, "ontem", date(2025, 6, 14), "day", True),
    ("Anteontem fui ao cinema", SUNDAY, "Anteontem", date(2025, 6, 13), "day", True),
    ("Hoje comecei na Acme", SUNDAY, "Hoje", date(2025, 6, 15), "day", True),
    ("Amanhã começo na Acme", SUNDAY, "Amanhã", date(2025, 6, 16), "day", True),
    ("Depois de amanhã viajo", SUNDAY, "Depois de amanhã", date(2025, 6, 17), "day", True),
    ("Comecei a trabalhar na Acme semana passada", SUNDAY, "semana passada", date(2025, 6, 2), "week", True),
    ("Mudei de emprego mês passado", SUNDAY, "mês passado", date(2025, 5, 1), "month", True),
    ("Casei ano passado", SUNDAY, "ano passado", date(2024, 1, 1), "year", True),
    ("Fui demitido há 3 dias", SUNDAY, "há 3 dias", date(2025, 6, 12), "day", True),
    ("Fui demitido 3 dias atrás", SUNDAY, "3 dias atrás", date(2025, 6, 12), "day", True),
    ("Fui demitido há 3 dias atrás", SUNDAY, "há 3 dias atrás", date(2025, 6, 12), "day", True),
    ("Comecei faz 2 semanas", SUNDAY, "faz 2 semanas", date(2025, 6, 1), "week", True),
    ("Há dois dias comprei um carro", SUNDAY, "Há dois dias", date(2025, 6, 13), "day", True),
    ("Me separei há duas semanas", SUNDAY, "há duas semanas", date(2025, 6, 1), "week", True),
    ("Me formei doze dias atrás", SUNDAY, "doze dias atrás", date(2025, 6, 3), "day", True),
    ("Entrei na Acme há um ano", SUNDAY, "há um ano", date(2024, 6, 15), "year", True),
    ("Me formei em março", SUNDAY, "em março", date(2025, 3, 1), "month", True),
    ("Me formei em março", at(2025, 2, 10), "em março", date(2024, 3, 1), "month", True),
    ("Na sexta eu adotei um gato", SUNDAY, "Na sexta", date(2025, 6, 13), "day", True),
    ("Sexta passada eu adotei um gato", SUNDAY, "Sexta passada", date(2025, 6, 13), "day", True),
    ("Na sexta-feira adotei um gato", MONDAY, "Na sexta-feira", date(2025, 6, 13), "day", True),
    ("Na sexta eu adotei um gato", FRIDAY, "Na sexta", date(2025, 6, 6), "day", True),
    ("No sábado fui à praia", SUNDAY, "No sábado", date(2025, 6, 14), "day", True),
    ("Sexta que vem começo na Acme", SUNDAY, "Sexta que vem", date(2025, 6, 20), "day", True),
    ("Na próxima segunda começo", SUNDAY, "Na próxima segunda", date(2025, 6, 16), "day", True),
    ("Semana que vem viajo", SUNDAY, "Semana que vem", date(2025, 6, 16), "week", True),
    ("Mês que vem mudo de casa", SUNDAY, "Mês que vem", date(2025, 7, 1), "month", True),
    ("Nasci em 15 de março de 2024", SUNDAY, "15 de março de 2024", date(2024, 3, 15), "day", False),
    ("Nasci no dia 1º de maio", SUNDAY, "1º de maio", date(2025, 5, 1), "day", True),
    ("O visto vence em 15/03/2024", SUNDAY, "15/03/2024", date(2024, 3, 15), "day", False),
    ("Começou em 05/03/2024", SUNDAY, "05/03/2024", date(2024, 3, 5), "day", False),
    ("Moro aqui desde 2019", SUNDAY, "desde 2019", date(2019, 1, 1), "year", False),
    ("Mudei em março de 2024", SUNDAY, "em março de 2024", date(2024, 3, 1), "month", False),
    # case and accents do not matter
    ("ONTEM ME MUDEI", SUNDAY, "ONTEM", date(2025, 6, 14), "day", True),
    ("amanha comeco", SUNDAY, "amanha", date(2025, 6, 16), "day", True),
    ("ha tres dias", SUNDAY, "ha tres dias", date(2025, 6, 12), "day", True),
    ("MES PASSADO mudei", SUNDAY, "MES PASSADO", date(2025, 5, 1), "month", True),
    # English
    ("I moved to Berlin yesterday", SUNDAY, "yesterday", date(2025, 6, 14), "day", True),
    ("The day before yesterday I quit", SUNDAY, "The day before yesterday", date(2025, 6, 13), "day", True),
    ("Today I started at Acme", SUNDAY, "Today", date(2025, 6, 15), "day", True),
    ("Tomorrow I start at Acme", SUNDAY, "Tomorrow", date(2025, 6, 16), "day", True),
    ("This morning I ran 5k", SUNDAY, "This morning", date(2025, 6, 15), "day", True),
    ("I'm moving out tonight", SUNDAY, "tonight", date(2025, 6, 15), "day", True),
    ("I started at Acme last week", SUNDAY, "last week", date(2025, 6, 2), "week", True),
    ("I started at Acme last week", MONDAY, "last week", date(2025, 6, 9), "week", True),
    ("I got married last month", SUNDAY, "last month", date(2025, 5, 1), "month", True),
    ("I got married last year", SUNDAY, "last year", date(2024, 1, 1), "year", True),
    ("I quit two weeks ago", SUNDAY, "two weeks ago", date(2025, 6, 1), "week", True),
    ("I moved 3 days ago", SUNDAY, "3 days ago", date(2025, 6, 12), "day", True),
    ("I moved a week ago", SUNDAY, "a week ago", date(2025, 6, 8), "week", True),
    ("I moved twelve days ago", SUNDAY, "twelve days ago", date(2025, 6, 3), "day", True),
    ("Last Friday I adopted a cat", SUNDAY, "Last Friday", date(2025, 6, 13), "day", True),
    ("Last Friday I adopted a cat", MONDAY, "Last Friday", date(2025, 6, 13), "day", True),
    ("Last Friday I adopted a cat", FRIDAY, "Last Friday", date(2025, 6, 6), "day", True),
    ("On Monday I adopted a cat", MONDAY, "On Monday", date(2025, 6, 9), "day", True),
    ("Next Friday I start", SUNDAY, "Next Friday", date(2025, 6, 20), "day", True),
    ("I graduated in March", SUNDAY, "in March", date(2025, 3, 1), "month", True),
    ("I graduated in March", at(2025, 2, 28), "in March", date(2024, 3, 1), "month", True),
    ("I start my new job next month", SUNDAY, "next month", date(2025, 7, 1), "month", True),
    ("I start next week", SUNDAY, "next week", date(2025, 6, 16), "week", True),
    ("I was born March 15, 2024", SUNDAY, "March 15, 2024", date(2024, 3, 15), "day", False),
    ("I was born on the 15th of March 2024", SUNDAY, "15th of March 2024", date(2024, 3, 15), "day", False),
    ("The lease began 2024-03-15", SUNDAY, "2024-03-15", date(2024, 3, 15), "day", False),
    ("The lease began 03/15/2024", SUNDAY, "03/15/2024", date(2024, 3, 15), "day", False),
    ("I moved here in 2019", SUNDAY, "in 2019", date(2019, 1, 1), "year", False),
    # Spanish
    ("Me mudé a Madrid ayer", SUNDAY, "ayer", date(2025, 6, 14), "day", True),
    ("Anteayer renuncié", SUNDAY, "Anteayer", date(2025, 6, 13), "day", True),
    ("Hoy empecé en Acme", SUNDAY, "Hoy", date(2025, 6, 15), "day", True),
    ("Mañana empiezo en Acme", SUNDAY, "Mañana", date(2025, 6, 16), "day", True),
    ("Esta mañana corrí", SUNDAY, "Esta mañana", date(2025, 6, 15), "day", True),
    ("Mañana por la mañana viajo", SUNDAY, "Mañana por la mañana", date(2025, 6, 16), "day", True),
    ("La semana pasada me casé", SUNDAY, "semana pasada", date(2025, 6, 2), "week", True),
    ("Hace 3 días compré un coche", SUNDAY, "Hace 3 días", date(2025, 6, 12), "day", True),
    ("Hace dos semanas renuncié", SUNDAY, "Hace dos semanas", date(2025, 6, 1), "week", True),
    ("Hace once días renuncié", SUNDAY, "Hace once días", date(2025, 6, 4), "day", True),
    ("El mes pasado me mudé", SUNDAY, "mes pasado", date(2025, 5, 1), "month", True),
    ("El año pasado me casé", SUNDAY, "año pasado", date(2024, 1, 1), "year", True),
    ("Me gradué en marzo", SUNDAY, "en marzo", date(2025, 3, 1), "month", True),
    ("El viernes pasado adopté un gato", SUNDAY, "El viernes pasado", date(2025, 6, 13), "day", True),
    ("El próximo viernes empiezo", SUNDAY, "El próximo viernes", date(2025, 6, 20), "day", True),
    ("Nací el 15 de marzo de 2024", SUNDAY, "15 de marzo de 2024", date(2024, 3, 15), "day", False),
    # month boundaries and leap years
    ("Ontem me mudei", at(2025, 3, 1), "Ontem", date(2025, 2, 28), "day", True),
    ("Yesterday I moved", at(2024, 3, 1), "Yesterday", date(2024, 2, 29), "day", True),
    ("Tomorrow I move", at(2024, 12, 31), "Tomorrow", date(2025, 1, 1), "day", True),
    ("Mês passado mudei", at(2025, 1, 15), "Mês passado", date(2024, 12, 1), "month", True),
    ("I moved one month ago", at(2024, 3, 31), "one month ago", date(2024, 2, 29), "month", True),
    ("I moved a year ago", at(2024, 2, 29), "a year ago", date(2023, 2, 28), "year", True),
    ("Nasci em 29 de fevereiro", SUNDAY, "29 de fevereiro", date(2024, 2, 29), "day", True),
    ("Last week I moved", at(2025, 1, 1), "Last week", date(2024, 12, 23), "week", True),
]


@pytest.mark.parametrize(("text", "occurred_at", "written", "day", "granularity", "relative"), CASES)
def test_expression_resolves_against_the_message_date(
    text: str, occurred_at: datetime, written: str, day: date, granularity: Granularity, relative: bool
) -> None:
    [found] = find_time_expressions(text, occurred_at)
    assert (found.text, found.day, found.granularity, found.relative) == (written, day, granularity, relative)
    assert text[found.start : found.end] == written


@pytest.mark.parametrize(
    "text",
    [
        "I ate a date",
        "I may go to the gym",  # "may" is a month only with "in" or a day number
        "A Maio é minha chefe",
        "O Março ligou pra mim",  # a bare month name is no date
        "Foi a sexta vez que tentei",  # "sexta" as an ordinal
        "Ela está na quinta série",
        "A segunda filha nasceu",
        "I'm a mañana person",
        "Corro por la mañana",  # habit, not tomorrow
        "Trabalho das 9 às 5",
        "Tenho 3 dias de férias",  # a duration, not a moment
        "I have a second cat",
        "Version 1.2.10 shipped",
        "Nasci em 31 de fevereiro de 2024",  # no such day
    ],
)
def test_text_without_a_time_expression_finds_none(text: str) -> None:
    assert find_time_expressions(text, SUNDAY) == []


def test_day_is_taken_in_the_zone_of_occurred_at() -> None:
    # 01:00 on the 15th in São Paulo's neighbour zone is still the 14th in UTC: "ontem" is the 14th, not the 13th.
    evening = datetime(2025, 6, 15, 1, 0, tzinfo=timezone(timedelta(hours=3)))
    assert [e.day for e in find_time_expressions("Ontem me mudei", evening)] == [date(2025, 6, 14)]
    late = datetime(2025, 6, 15, 23, 59, tzinfo=UTC)
    assert [e.day for e in find_time_expressions("Hoje me mudei", late)] == [date(2025, 6, 15)]


def test_longest_overlapping_expression_wins_and_spans_point_into_the_text() -> None:
    text = "Fui demitido há três dias; sexta passada adotei um gato em 15 de março de 2024."
    found = find_time_expressions(text, SUNDAY)
    assert [(e.text, text[e.start : e.end]) for e in found] == [
        ("há três dias", "há três dias"),
        ("sexta passada", "sexta passada"),
        ("15 de março de 2024", "15 de março de 2024"),
    ]


def test_undirected_weekday_and_month_also_cover_their_future_reading() -> None:
    [friday] = find_time_expressions("Na sexta começo na Acme", SUNDAY)
    assert friday.covers(date(2025, 6, 13)) and friday.covers(date(2025, 6, 20))
    assert not friday.covers(date(2025, 6, 19))
    [march] = find_time_expressions("em março", SUNDAY)
    assert march.covers(date(2025, 3, 20)) and march.covers(date(2026, 3, 2)) and not march.covers(date(2025, 4, 1))
    [last] = find_time_expressions("sexta passada", SUNDAY)
    assert not last.covers(date(2025, 6, 20))


def test_a_shift_past_the_calendar_is_no_expression() -> None:
    assert find_time_expressions("amanhã", datetime(9999, 12, 31, tzinfo=UTC)) == []


# --- the valid-time rule --------------------------------------------------------------------------------------

MIDNIGHT_14 = datetime(2025, 6, 14, tzinfo=UTC)


def test_rewritten_fact_takes_the_message_expression() -> None:
    chosen = valid_time(None, "Rafael moved to São Paulo", "Me mudei pra São Paulo ontem", SUNDAY)
    assert (chosen.valid_from, chosen.source, chosen.expression) == (MIDNIGHT_14, "resolved", "ontem")


def test_model_date_that_the_fact_own_expression_disagrees_with_is_overridden() -> None:
    model = datetime(2025, 6, 15, tzinfo=UTC)
    message = "Me mudei pra São Paulo ontem"
    chosen = valid_time(model, "Rafael moved to São Paulo yesterday", message, SUNDAY)
    assert (chosen.valid_from, chosen.source, chosen.expression, chosen.overridden) == (
        MIDNIGHT_14,
        "resolved",
        "yesterday",
        model,
    )
    # the model's date that agrees with the same words stands
    kept = valid_time(MIDNIGHT_14, "Rafael moved to São Paulo yesterday", message, SUNDAY)
    assert (kept.valid_from, kept.source, kept.overridden) == (MIDNIGHT_14, "model", None)


def test_model_date_stands_against_an_expression_only_the_message_holds() -> None:
    # The message's clauses only date a fact the model gave no date: a rewritten fact keeps the model's date.
    model = datetime(2025, 6, 15, tzinfo=UTC)
    chosen = valid_time(model, "Rafael moved to São Paulo", "Me mudei pra São Paulo ontem", SUNDAY)
    assert (chosen.valid_from, chosen.source, chosen.expression, chosen.overridden) == (model, "model", None, None)


def test_model_date_stands_against_an_indefinite_expression_of_the_fact() -> None:
    # A bare weekday may be a habit or the next one, "em março" this year's or next: neither overrides the model.
    june_1 = datetime(2025, 6, 1, tzinfo=UTC)
    weekday = valid_time(june_1, "Rafael adopted a cat on Friday", "Na sexta adotei um gato", SUNDAY)
    assert (weekday.valid_from, weekday.source, weekday.overridden) == (june_1, "model", None)
    january = datetime(2025, 1, 10, tzinfo=UTC)
    month = valid_time(january, "Rafael se formou em março", "Me formei em março", SUNDAY)
    assert (month.valid_from, month.source, month.overridden) == (january, "model", None)
    # "sexta passada" says which Friday: it overrides
    last = valid_time(june_1, "Rafael adotou um gato sexta passada", "Sexta passada adotei um gato", SUNDAY)
    assert (last.valid_from, last.source, last.overridden) == (datetime(2025, 6, 13, tzinfo=UTC), "resolved", june_1)


def test_model_date_within_the_expression_granularity_is_kept() -> None:
    model = datetime(2025, 5, 20, tzinfo=UTC)
    message = "Mudei de emprego mês passado"
    chosen = valid_time(model, "Rafael mudou de emprego mês passado", message, SUNDAY)
    assert (chosen.valid_from, chosen.source, chosen.expression, chosen.overridden) == (model, "model", None, None)
    # a day outside last month is overridden by its first day
    april = datetime(2025, 4, 20, tzinfo=UTC)
    outside = valid_time(april, "Rafael mudou de emprego mês passado", message, SUNDAY)
    assert (outside.valid_from, outside.source, outside.expression, outside.overridden) == (
        datetime(2025, 5, 1, tzinfo=UTC),
        "resolved",
        "mês passado",
        april,
    )


def test_fact_expression_beats_the_message() -> None:
    message = "Ontem fui ao cinema e sexta passada adotei um gato"
    chosen = valid_time(None, "Rafael adopted a cat last Friday", message, SUNDAY)
    assert (chosen.valid_from, chosen.expression) == (datetime(2025, 6, 13, tzinfo=UTC), "last Friday")


def test_fact_tied_to_another_clause_ignores_the_message_expression() -> None:
    message = "Moro em Curitiba e ontem fui ao cinema"
    assert valid_time(None, "Rafael mora em Curitiba", message, SUNDAY).source == "occurred_at"
    assert valid_time(None, "Rafael foi ao cinema", message, SUNDAY).valid_from == MIDNIGHT_14
    assert valid_time(None, "Rafael went to the movies", message, SUNDAY).valid_from == MIDNIGHT_14


def test_an_expression_covering_the_message_day_keeps_the_message_time() -> None:
    # Without a model date, "today" and "this week" give no earlier day than the message's own: its time is kept.
    today = valid_time(None, "Rafael started at Acme today", "Hoje comecei na Acme", SUNDAY)
    assert (today.valid_from, today.source, today.expression) == (SUNDAY, "occurred_at", None)
    this_week = valid_time(None, "Rafael started at Acme this week", "Comecei na Acme essa semana", SUNDAY)
    assert (this_week.valid_from, this_week.source, this_week.expression) == (SUNDAY, "occurred_at", None)
    # "last week" gives an earlier day
    last_week = valid_time(None, "Rafael started at Acme last week", "Comecei na Acme semana passada", SUNDAY)
    assert (last_week.valid_from, last_week.source, last_week.expression) == (
        datetime(2025, 6, 2, tzinfo=UTC),
        "resolved",
        "last week",
    )


def test_model_date_without_any_expression_is_kept_even_after_the_message() -> None:
    past = datetime(2020, 1, 1, tzinfo=UTC)
    kept = valid_time(past, "Rafael lives in Lisbon", "Moro em Lisboa", SUNDAY)
    assert (kept.valid_from, kept.source, kept.overridden) == (past, "model", None)
    future = datetime(2025, 7, 1, tzinfo=UTC)
    chosen = valid_time(future, "Rafael lives in Lisbon", "Moro em Lisboa", SUNDAY)
    assert (chosen.valid_from, chosen.source, chosen.overridden) == (future, "model", None)


def test_future_model_date_is_kept_unless_the_fact_own_words_give_another() -> None:
    message = "Semana que vem começo na Bosch"
    monday = datetime(2025, 6, 16, tzinfo=UTC)
    wednesday = datetime(2025, 6, 18, tzinfo=UTC)
    for model in (monday, wednesday):  # any day of next week
        chosen = valid_time(model, "Rafael starts at Bosch next week", message, SUNDAY)
        assert (chosen.valid_from, chosen.source, chosen.overridden) == (model, "model", None)
    july = datetime(2025, 7, 1, tzinfo=UTC)
    wrong = valid_time(july, "Rafael starts at Bosch next week", message, SUNDAY)
    assert (wrong.valid_from, wrong.source, wrong.expression, wrong.overridden) == (
        monday,
        "resolved",
        "next week",
        july,
    )


def test_absolute_date_neither_decides_nor_confirms() -> None:
    # A date written out is often what the fact is about, not when it began.
    deadline = valid_time(None, "Mira's passport deadline is 2026-07-15", "Passport deadline 2026-07-15", SUNDAY)
    assert (deadline.valid_from, deadline.source, deadline.expression) == (SUNDAY, "occurred_at", None)
    graduated = "Rafael se formou em 15/03/2024"
    model = datetime(2024, 3, 15, tzinfo=UTC)
    agreeing = valid_time(model, graduated, "Me formei em 15/03/2024", SUNDAY)
    assert (agreeing.valid_from, agreeing.source, agreeing.expression) == (model, "model", None)
    other = datetime(2023, 1, 1, tzinfo=UTC)
    disagreeing = valid_time(other, graduated, "Me formei em 15/03/2024", SUNDAY)
    assert (disagreeing.valid_from, disagreeing.source, disagreeing.overridden) == (other, "model", None)
    # a relative expression of the same fact does override
    relative = valid_time(other, "Rafael se formou ontem", "Me formei ontem", SUNDAY)
    assert (relative.valid_from, relative.source, relative.overridden) == (MIDNIGHT_14, "resolved", other)


def test_model_may_pick_the_future_reading_of_an_undirected_weekday() -> None:
    next_friday = datetime(2025, 6, 20, tzinfo=UTC)
    chosen = valid_time(next_friday, "Rafael starts at Acme on Friday", "Na sexta começo na Acme", SUNDAY)
    assert (chosen.valid_from, chosen.source) == (next_friday, "model")


def test_several_expressions_that_disagree_give_the_message_time_or_keep_the_model() -> None:
    message = "Ontem me mudei e semana que vem começo na Acme"
    chosen = valid_time(None, "Rafael has big changes ahead", message, SUNDAY)
    assert (chosen.valid_from, chosen.source) == (SUNDAY, "occurred_at")
    model = datetime(2025, 1, 1, tzinfo=UTC)
    kept = valid_time(model, "Rafael has big changes ahead", message, SUNDAY)
    assert (kept.valid_from, kept.source, kept.overridden) == (model, "model", None)
    both = valid_time(model, "Rafael moved yesterday and starts at Acme next week", message, SUNDAY)
    assert (both.valid_from, both.source, both.overridden) == (model, "model", None)
    # a shared word ties the fact to one clause, and so to its expression
    next_monday = datetime(2025, 6, 16, tzinfo=UTC)
    assert valid_time(None, "Rafael starts at Acme", message, SUNDAY).valid_from == next_monday
    # one expression of the fact's own text overrides the model
    one = valid_time(model, "Rafael starts at Acme next week", message, SUNDAY)
    assert (one.valid_from, one.source, one.overridden) == (next_monday, "resolved", model)


def test_unread_language_keeps_the_model_date_or_the_message_time() -> None:
    model = datetime(2025, 6, 15, tzinfo=UTC)
    fact, message = "Rafael moved to São Paulo yesterday", "Me mudei pra São Paulo ontem"
    kept = valid_time(model, fact, message, SUNDAY, read_words=False)
    assert (kept.valid_from, kept.source, kept.overridden) == (model, "model", None)
    unread = valid_time(None, fact, message, SUNDAY, read_words=False)
    assert (unread.valid_from, unread.source, unread.expression) == (SUNDAY, "occurred_at", None)
    # the same words read
    assert valid_time(model, fact, message, SUNDAY).valid_from == MIDNIGHT_14
    assert valid_time(None, fact, message, SUNDAY).valid_from == MIDNIGHT_14


# --- end to end: the stored valid_from -------------------------------------------------------------------------


def dated(answer: dict[str, Any], valid_from: str) -> dict[str, Any]:
    answer["facts"][0]["valid_from"] = valid_from
    return answer


async def test_write_resolves_ontem_when_the_model_gives_no_date(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [extraction(("Rafael", "Rafael moved to São Paulo"))]})
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id, "Me mudei pra São Paulo ontem", speaker_name="Rafael", occurred_at=SUNDAY, verbose=True
        )
        assert result.success, result.error
        [fact] = await memory.get_facts(agent_id, entity="Rafael")
        assert fact.valid_from == MIDNIGHT_14
        assert result.pipeline is not None
        [trace] = result.pipeline.step("reconciliation").data["valid_from"]
        assert (trace["source"], trace["expression"], trace["overridden"]) == ("resolved", "ontem", None)


async def test_write_overrides_a_model_date_that_ignores_the_fact_own_ontem(
    make_client: ClientFactory, agent_id: str
) -> None:
    answer = dated(extraction(("Rafael", "Rafael se mudou pra São Paulo ontem")), "2025-06-15")
    async with make_client(ScriptedLLM({"informed_extraction": [answer]})) as memory:
        result = await memory.write(
            agent_id, "Me mudei pra São Paulo ontem", speaker_name="Rafael", occurred_at=SUNDAY, verbose=True
        )
        [fact] = result.facts_added
        assert fact.valid_from == MIDNIGHT_14
        assert result.pipeline is not None
        [trace] = result.pipeline.step("reconciliation").data["valid_from"]
        assert (trace["source"], trace["expression"], trace["overridden"]) == (
            "resolved",
            "ontem",
            "2025-06-15T00:00:00+00:00",
        )
        assert [(a.rule, a.before, a.after) for a in result.adjustments] == [("date", "2025-06-15", "2025-06-14")]


async def test_write_keeps_a_model_date_when_only_the_message_says_ontem(
    make_client: ClientFactory, agent_id: str
) -> None:
    answer = dated(extraction(("Rafael", "Rafael se mudou pra São Paulo")), "2025-06-15")
    async with make_client(ScriptedLLM({"informed_extraction": [answer]})) as memory:
        result = await memory.write(
            agent_id, "Me mudei pra São Paulo ontem", speaker_name="Rafael", occurred_at=SUNDAY, verbose=True
        )
        [fact] = result.facts_added
        assert fact.valid_from == datetime(2025, 6, 15, tzinfo=UTC)
        assert result.pipeline is not None
        [trace] = result.pipeline.step("reconciliation").data["valid_from"]
        assert (trace["source"], trace["expression"], trace["overridden"]) == ("model", None, None)
        assert result.adjustments == []


async def test_write_keeps_a_model_date_the_text_states(make_client: ClientFactory, agent_id: str) -> None:
    # The model's time of day is kept: the date agrees with the absolute date of the text.
    answer = dated(extraction(("Rafael", "Rafael se formou em 15 de março de 2024")), "2024-03-15T09:30:00Z")
    async with make_client(ScriptedLLM({"informed_extraction": [answer]})) as memory:
        result = await memory.write(
            agent_id, "Me formei em 15 de março de 2024", speaker_name="Rafael", occurred_at=SUNDAY
        )
        [fact] = result.facts_added
        assert fact.valid_from == datetime(2024, 3, 15, 9, 30, tzinfo=UTC)


async def test_write_keeps_a_future_model_date_the_text_does_not_contradict(
    make_client: ClientFactory, agent_id: str
) -> None:
    september = datetime(2025, 9, 1, tzinfo=UTC)
    answer = dated(extraction(("Ana", "Ana lives in Lisbon")), "2025-09-01")
    async with make_client(ScriptedLLM({"informed_extraction": [answer]})) as memory:
        result = await memory.write(agent_id, "I live in Lisbon", speaker_name="Ana", occurred_at=SUNDAY)
        [fact] = result.facts_added
        assert fact.valid_from == september
        assert result.adjustments == []


async def test_write_overrides_a_future_model_date_the_fact_own_words_contradict(
    make_client: ClientFactory, agent_id: str
) -> None:
    answer = dated(extraction(("Ana", "Ana starts at Bosch next week")), "2025-09-01")
    async with make_client(ScriptedLLM({"informed_extraction": [answer]})) as memory:
        result = await memory.write(agent_id, "Next week I start at Bosch", speaker_name="Ana", occurred_at=SUNDAY)
        [fact] = result.facts_added
        assert fact.valid_from == datetime(2025, 6, 16, tzinfo=UTC)
        assert [(a.rule, a.before, a.after) for a in result.adjustments] == [("date", "2025-09-01", "2025-06-16")]
