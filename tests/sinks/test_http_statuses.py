"""Status-code rules (``successStatusCodes``, ``retryStatusCodes``,
``badRecordStatusCodes``) and the failure policy (``onRetriesExhausted``,
``maxDeadLetters``), through a real HTTP writer against a local endpoint that answers each
entry with the status it asks for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncsink import DeadLetter, DeadLetterError, DeliveryError, FatalError, OptionError
from asyncsink.sinks.http import HttpOptions, create_writer
from asyncsink.sinks.http.statuses import StatusRules, parse_codes
from tests.servers.answering import AnsweringServer

FAST = {"maxRetries": "2", "initialBackoffMs": "1", "maxBackoffMs": "5", "maxBatchSize": "10"}


def run(options: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
    async def main() -> Any:
        writer = create_writer(options)
        async with writer:
            await writer.write_all(rows)
        return writer.statistics()

    return asyncio.run(main())


def rows_answering(
    count: int, answers: dict[int, int], key: str = "answer"
) -> list[dict[str, Any]]:
    return [{"id": i, **({key: answers[i]} if i in answers else {})} for i in range(count)]


# ---------------------------------------------------------------- the option's values


def test_codes_and_ranges_parse() -> None:
    assert parse_codes("x", "200-202, 409") == frozenset({200, 201, 202, 409})
    assert parse_codes("x", "") == frozenset()
    assert parse_codes("x", None) is None
    assert parse_codes("x", [409]) == frozenset({409})


@pytest.mark.parametrize("value", ["600", "99", "2oo", "300-200", "200,,201", "200-", [700]])
def test_unknown_codes_name_the_option(value: Any) -> None:
    with pytest.raises(OptionError, match="successStatusCodes"):
        HttpOptions(url="http://127.0.0.1:1/", success_status_codes=value)


def test_an_overlap_names_both_options() -> None:
    with pytest.raises(OptionError, match="successStatusCodes.*retryStatusCodes.*409"):
        HttpOptions(
            url="http://127.0.0.1:1/", success_status_codes="200-299,409", retry_status_codes="409"
        )
    with pytest.raises(OptionError, match="badRecordStatusCodes"):
        create_writer({"url": "http://127.0.0.1:1/", "retryStatusCodes": "422,503",
                       "badRecordStatusCodes": "400-499"})  # fmt: skip


def test_defaults_are_todays_and_an_option_given_moves_codes_out_of_the_others() -> None:
    rules = StatusRules.from_options(None, None, None)
    assert rules.success == frozenset(range(200, 300))
    assert rules.retry == frozenset({408, 409, 425, 429, *range(500, 600)})
    assert rules.bad_record == frozenset()
    moved = StatusRules.from_options("200-299,409", None, "422")
    assert 409 in moved.success and 409 not in moved.retry and 422 in moved.bad_record
    assert moved.throttled(429) and moved.throttled(503) and not moved.throttled(500)


# ---------------------------------------------------------------- through a writer


def test_409_items_count_as_delivered_and_422_items_as_bad_records() -> None:
    answers = {i: 409 for i in range(0, 40, 7)} | {i: 422 for i in range(3, 40, 9)}
    letters: list[DeadLetter] = []
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "successStatusCodes": "200-299,409",
                   "badRecordStatusCodes": "422", "deadLetter": letters.append}  # fmt: skip
        stats = run(options, rows_answering(40, answers))
        sent = len(server.arrivals)
    conflicts = sum(1 for s in answers.values() if s == 409)
    assert stats.delivered == 40 - (len(answers) - conflicts)
    assert stats.dead_lettered == len(answers) - conflicts
    assert sorted(int(d.record.split(b'"id":')[1].split(b",")[0]) for d in letters) == sorted(
        i for i, s in answers.items() if s == 422
    )
    assert all("422" in d.reason for d in letters)
    assert sent == 4  # nothing was sent again: 409 no longer retries


def test_by_default_a_409_item_is_retried_and_a_422_item_is_a_bad_record() -> None:
    with AnsweringServer() as server:
        with pytest.raises(DeliveryError):
            run({"url": server.url, **FAST}, rows_answering(10, {2: 409}))
        assert [s for i, s in server.answered if i == 2] == [409, 409, 409]


def test_whole_answers_follow_the_rules() -> None:
    letters: list[DeadLetter] = []
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "successStatusCodes": "200-299,409",
                   "badRecordStatusCodes": "422", "deadLetter": letters.append}  # fmt: skip
        whole_409 = [{"id": i, "whole": 409} for i in range(10)]
        whole_422 = [{"id": i, "whole": 422} for i in range(10, 20)]
        stats = run(options, whole_409 + whole_422)
        assert stats.delivered == 10 and stats.dead_lettered == 10
        assert all("HTTP 422 for the whole request" in d.reason for d in letters)
        with pytest.raises(FatalError, match="HTTP 422"):  # by default a whole 422 is fatal
            run({"url": server.url, **FAST}, whole_422)


# ---------------------------------------------------------------- out of retries


def test_entries_out_of_retries_go_to_the_dead_letters_and_the_task_goes_on() -> None:
    always = {i: 503 for i in range(5, 100, 10)}
    letters: list[DeadLetter] = []
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "onRetriesExhausted": "deadLetter",
                   "deadLetter": letters.append}  # fmt: skip
        stats = run(options, rows_answering(100, always))
    assert stats.delivered == 90 and stats.dead_lettered == 10 and stats.failed == 0
    assert stats.diverted == 10
    assert {int(d.record.split(b'"id":')[1].split(b",")[0]) for d in letters} == set(always)
    assert all(d.reason.startswith("out of retries (maxRetries=2)") for d in letters)


def test_out_of_retries_fails_the_task_by_default() -> None:
    with AnsweringServer() as server, pytest.raises(DeliveryError):
        run({"url": server.url, **FAST, "deadLetter": lambda d: None},
            rows_answering(20, {4: 503}))  # fmt: skip


def test_a_destination_down_fails_the_task_even_with_dead_letters() -> None:
    # Nothing listens there: whole requests fail, never entries one by one.
    with AnsweringServer() as server:
        url = server.url
    letters: list[DeadLetter] = []
    options = {"url": url, **FAST, "onRetriesExhausted": "deadLetter",
               "failFastOnConnectionRefused": "false", "deadLetter": letters.append}  # fmt: skip
    with pytest.raises(DeliveryError):
        run(options, rows_answering(20, {}))
    assert letters == []


def test_max_dead_letters_fails_the_task_saying_how_many_went_where() -> None:
    letters: list[DeadLetter] = []
    with AnsweringServer() as server:
        options = {"url": server.url, **FAST, "onRetriesExhausted": "deadLetter",
                   "maxDeadLetters": "3", "deadLetter": letters.append}  # fmt: skip
        with pytest.raises(DeadLetterError, match=r"3 records went to .*maxDeadLetters \(3\)"):
            run(options, rows_answering(40, {i: 422 for i in range(0, 40, 5)}))
    assert len(letters) == 3


def test_dead_letter_on_exhaustion_needs_a_dead_letter_target() -> None:
    with pytest.raises(OptionError, match="onRetriesExhausted"):
        create_writer({"url": "http://127.0.0.1:1/", "onRetriesExhausted": "deadletter"})
