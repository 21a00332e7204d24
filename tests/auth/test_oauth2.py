"""OAuth2 client credentials on the HTTP sink: one token per process shared by its writers,
renewed before it expires, renewed at once after a 401, and a refused client failing the
task at once with the options to check."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from asyncsink import FatalError, OptionError
from asyncsink.sinks.http import create_writer
from asyncsink.sinks.web import oauth2
from tests.servers.oauth2 import OAuth2Server

pytestmark = pytest.mark.anyio

CLIENT_ID, CLIENT_SECRET = "spark-job", "cl1ent/s3cret:Qz"


@pytest.fixture
def server() -> Iterator[OAuth2Server]:
    oauth2._TOKENS.clear()  # each test starts without a token in this process
    with OAuth2Server(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, life_s=2) as found:
        yield found
    oauth2._TOKENS.clear()


def options(server: OAuth2Server, **overrides: str) -> dict[str, str]:
    return {
        "url": f"{server.url}/ingest",
        "oauth2TokenUrl": f"{server.url}/token",
        "oauth2ClientId": CLIENT_ID,
        "oauth2ClientSecret": CLIENT_SECRET,
        "maxBatchSize": "20",
        "maxInFlightRequests": "4",
        "initialBackoffMs": "1",
        "maxBackoffMs": "50",
        **overrides,
    }


def rows(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "v": i} for i in range(count)]


async def test_writers_of_a_process_share_one_token(server: OAuth2Server) -> None:
    async def one(name: str) -> None:
        async with create_writer(options(server)) as writer:
            await writer.write_all(rows(name, 100))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            for name in ("a", "b", "c"):
                group.start_soon(one, name)
    assert server.state.issued == 1
    assert len(server.state.ids) == 300


@pytest.mark.parametrize("auth", ["basic", "post"])
async def test_the_client_authenticates_as_asked_with_scope_and_audience(
    server: OAuth2Server, auth: str
) -> None:
    given = options(server, oauth2ClientAuth=auth, oauth2Scope="ingest:write",
                    oauth2Audience="https://api.example")  # fmt: skip
    async with create_writer(given) as writer:
        await writer.write_all(rows(auth, 5))
    form = server.state.forms[-1]
    assert form["scope"] == ["ingest:write"] and form["audience"] == ["https://api.example"]
    assert ("client_secret" in form) == (auth == "post")


async def test_tokens_are_renewed_before_they_expire(server: OAuth2Server) -> None:
    with anyio.fail_after(20):
        async with create_writer(options(server, maxTimeInBufferMs="50")) as writer:
            deadline = time.monotonic() + 5
            i = 0
            while time.monotonic() < deadline:
                await writer.write({"id": f"t-{i}", "v": i})
                i += 1
                await anyio.sleep(0.05)
    assert server.state.issued >= 3  # 2-second tokens over 5 seconds
    assert len(server.state.ids) == i
    assert server.state.unauthorized == 0  # renewed ahead of time, never used expired


async def test_a_401_renews_the_token_once_and_sends_the_request_again(
    server: OAuth2Server,
) -> None:
    async with create_writer(options(server)) as writer:
        await writer.write_all(rows("before", 20))
        await writer.flush()
        server.revoke()  # the server forgets every token: the next request gets a 401
        await writer.write_all(rows("after", 20))
    assert server.state.unauthorized == 1
    assert server.state.issued == 2
    assert len(server.state.ids) == 40
    assert writer.statistics().requests_failed == 0


async def test_a_refused_client_fails_at_once_naming_the_options(server: OAuth2Server) -> None:
    given = options(server, oauth2ClientSecret="wrong-secret-Zq", maxRetries="10")
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        with anyio.fail_after(20):
            async with create_writer(given) as writer:
                await writer.write_all(rows("refused", 5))
    assert time.monotonic() - started < 3
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    fatal = next(e for e in chain if isinstance(e, FatalError))
    message = str(fatal)
    assert "invalid_client" in message and "oauth2TokenUrl" in message
    assert "oauth2ClientSecret" in message and "wrong-secret-Zq" not in message
    assert server.state.refused_clients == 1  # not retried


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"oauth2TokenUrl": "ftp://auth.example/token"}, "oauth2TokenUrl"),
        ({"oauth2TokenUrl": "https://auth.example/token"}, "oauth2ClientId"),
        ({"oauth2TokenUrl": "https://auth.example/token", "oauth2ClientId": "id"},
         "oauth2ClientSecret"),
        ({"oauth2ClientId": "id"}, "oauth2ClientId"),
        ({"oauth2TokenUrl": "https://a.example/t", "oauth2ClientId": "i",
          "oauth2ClientSecret": "s", "bearerToken": "t"}, "oauth2TokenUrl"),
    ],
)  # fmt: skip
def test_oauth2_options_are_checked_before_anything_runs(
    given: dict[str, str], option: str
) -> None:
    with pytest.raises(OptionError) as caught:
        create_writer({"url": "https://api.example/in", **given})
    assert caught.value.option == option, str(caught.value)
