"""The rate cap: a writer keeps its share of ``maxRequestsPerSecond`` (and of entries and
bytes) with token buckets, against a local endpoint that records arrival times."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asyncsink import OptionError, SinkOptions
from asyncsink.policies.rate_cap import RateCap, rate_cap_for
from asyncsink.sinks.http import create_writer
from asyncsink.spark.spec import SinkSpec, cores_of_master
from tests.servers.answering import AnsweringServer


def run(options: dict[str, Any], rows: int) -> Any:
    async def main() -> Any:
        writer = create_writer(options)
        async with writer:
            await writer.write_all([{"id": i} for i in range(rows)])
        return writer.statistics()

    return asyncio.run(main())


def most_in_a_second(times: list[float]) -> int:
    times = sorted(times)
    most = 0
    start = 0
    for end, t in enumerate(times):
        while times[start] <= t - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_a_bucket_never_bursts_and_keeps_its_rate() -> None:
    cap = RateCap(requests=10)
    now, started = 0.0, []
    while now < 3.0:
        wait = cap.wait(now)
        if wait:
            now += wait
            continue
        cap.took(1, 10, now)
        started.append(now)
    assert most_in_a_second(started) <= 11
    assert len(started) >= 29
    assert cap.waited > 2.5


def test_entries_and_bytes_go_into_debt_by_one_request_at_most() -> None:
    cap = RateCap(entries=100, bytes_=1000)  # no debt to start with
    assert cap.wait(0.0) == 0
    cap.took(50, 100, 0.0)
    assert cap.wait(0.0) == pytest.approx(0.5)
    cap.took(1, 2000, 0.5)
    assert cap.wait(0.5) == pytest.approx(2.0)
    indebted = RateCap(entries=100, batch=10)  # one request in debt: 0.1 s to wait
    assert indebted.wait(0.0) == pytest.approx(0.1)


def test_the_options_split_the_caps_among_shares() -> None:
    assert repr(rate_cap_for(SinkOptions())) == "RateCap()"
    assert rate_cap_for(SinkOptions()).wait(0.0) == 0
    cap = rate_cap_for(SinkOptions(max_requests_per_second=50, rate_cap_shares=4))
    assert repr(cap) == "RateCap(requests=12.5/s)"
    with pytest.raises(OptionError, match="maxRequestsPerSecond"):
        SinkOptions.from_options({"maxRequestsPerSecond": "-1"})


def test_the_driver_sets_the_shares_only_for_a_cap_the_user_did_not_split() -> None:
    url = {"url": "http://127.0.0.1:1/"}
    assert SinkSpec("http", url).with_rate_shares(4).options == url
    capped = SinkSpec("http", {**url, "maxRequestsPerSecond": "50"})
    assert capped.with_rate_shares(4).options["rateCapShares"] == "4"
    assert capped.with_rate_shares(None).options["rateCapShares"] == "1"
    given = SinkSpec("http", {**url, "maxEntriesPerSecond": "50", "RATECAPSHARES": "2"})
    assert "rateCapShares" not in given.with_rate_shares(8).options
    assert cores_of_master("local[4]") == 4 and cores_of_master("local[3,2]") == 3
    assert cores_of_master("local-cluster[2,1,1024]") == 2 and cores_of_master("yarn") is None


def test_a_writer_keeps_its_request_rate() -> None:
    with AnsweringServer() as server:
        stats = run({"url": server.url, "maxBatchSize": "1", "maxRequestsPerSecond": "20"}, 50)
        times = [t for t, _ in server.arrivals]
    assert stats.delivered == 50
    assert 1500 <= stats.rate_cap_waited_ms <= 3000  # 49 requests at 20 a second
    assert most_in_a_second(times) <= 21
    assert len(times) / (max(times) - min(times)) >= 18


def test_a_writer_keeps_its_entry_rate() -> None:
    with AnsweringServer() as server:
        options = {"url": server.url, "maxBatchSize": "10", "maxEntriesPerSecond": "200"}
        stats = run(options, 600)
        arrivals = server.arrivals
    assert stats.delivered == 600
    start = min(t for t, _ in arrivals)
    span = max(t for t, _ in arrivals) - start
    assert 2.5 <= span <= 3.5  # 600 entries at 200 a second
