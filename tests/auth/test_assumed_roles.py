"""Assumed roles on every AWS-facing part: STS is moto's server, sessions are short, so the
credentials are renewed in the middle of a writer's run. The HTTP sink's SigV4 is checked
against the role's own keys; Kinesis (kinesalite) and the DynamoDB record store (moto)
work through the role."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from aiobotocore.session import get_session

from asyncsink import OptionError
from asyncsink.aws.credentials import AwsIdentity, CredentialSource
from asyncsink.sinks.http import create_writer as http_writer
from asyncsink.sinks.kinesis import create_writer as kinesis_writer
from asyncsink.stores import open_store
from asyncsink.stores.base import Scope
from asyncsink.testing import FaultServer
from asyncsink.testing.sigv4 import SigV4Check
from tests.servers.sts import assumed_roles, secret_of

pytestmark = pytest.mark.anyio

ROLE = "arn:aws:iam::210987654321:role/cross-account-writer"
SOURCE = {"awsAccessKeyId": "AKIDSOURCE", "awsSecretAccessKey": "source-secret"}
ROLE_OPTIONS = {**SOURCE, "awsRoleArn": ROLE, "awsExternalId": "ext-4242",
                "awsRoleSessionName": "asyncsink-test", "awsRoleDurationMs": "2s"}  # fmt: skip


@pytest.fixture(scope="module")
def api(sts_endpoint: str) -> Iterator[FaultServer]:
    check = SigV4Check("execute-api", "us-east-1", secret_for=secret_of)
    with FaultServer(sigv4=check, in_thread=True) as server:
        yield server


def sessions_of(role: str = ROLE) -> list[Any]:
    return [found for found in assumed_roles() if found.role_arn == role]


async def write_for(writer: Any, seconds: float, prefix: str) -> int:
    """Write a row every 20 ms for ``seconds``; the number written."""
    count = 0
    with anyio.fail_after(seconds + 20):
        async with writer:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await writer.write({"id": f"{prefix}-{count}", "v": count})
                count += 1
                await anyio.sleep(0.02)
    return count


async def test_sigv4_through_an_assumed_role_renews_it_mid_run(api: FaultServer) -> None:
    api.reset()
    before = len(sessions_of())
    options = {"url": api.ingest_url, "awsService": "execute-api", "region": "us-east-1",
               "maxTimeInBufferMs": "100", **ROLE_OPTIONS}  # fmt: skip
    written = await write_for(http_writer(options), 4.0, "role")
    stats = api.stats()
    assert stats.entries_received == written
    assert stats.statuses.get(403, 0) == 0  # every request verified with the role's keys
    sessions = sessions_of()[before:]
    assert len(sessions) >= 2, "the 2-second role was not renewed mid-run"
    assert {s.session_name for s in sessions} == {"asyncsink-test"}
    assert {s.external_id for s in sessions} == {"ext-4242"}


async def test_one_source_per_identity_renews_before_expiry(sts_endpoint: str) -> None:
    identity = AwsIdentity(access_key_id="AKIDSOURCE", secret_access_key="s",
                           role_arn=ROLE, role_duration_s=2, region="us-east-1")  # fmt: skip
    source = CredentialSource(identity)
    first = await source.current()
    assert await source.current() is first  # fresh: no STS call
    assert source.expires_at - time.time() <= 2.5
    await anyio.sleep(1.6)  # past three quarters of its life
    second = await source.current()
    assert second.access_key != first.access_key and source.refreshes == 2
    assert first.secret_key not in repr(source)


async def test_a_refused_role_fails_naming_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")  # nothing listens
    identity = AwsIdentity(access_key_id="AKID", secret_access_key="s", role_arn=ROLE,
                           region="us-east-1")  # fmt: skip
    with pytest.raises(Exception) as caught:
        await CredentialSource(identity).current()
    assert "awsRoleArn" in str(caught.value)


def test_a_bad_role_arn_fails_on_the_driver() -> None:
    with pytest.raises(OptionError) as caught:
        kinesis_writer({"streamName": "events", "region": "us-east-1",
                        "awsRoleArn": "arn:aws:iam::12:role/x"})  # fmt: skip
    assert caught.value.option == "awsRoleArn"
    with pytest.raises(ValueError, match="role_arn"):
        open_store("dynamodb://calls?region=us-east-1&role_arn=arn:aws:iam::1:user/x")


# ---------------------------------------------------------------------- Kinesis, DynamoDB


@pytest.fixture
async def stream(kinesalite_endpoint: str) -> AsyncIterator[str]:
    name = f"role-{uuid.uuid4().hex[:8]}"
    async with get_session().create_client(
        "kinesis", region_name="us-east-1", endpoint_url=kinesalite_endpoint,
        aws_access_key_id="admin", aws_secret_access_key="admin",
    ) as admin:  # fmt: skip
        await admin.create_stream(StreamName=name, ShardCount=1)
        with anyio.fail_after(30):
            while True:
                found = await admin.describe_stream_summary(StreamName=name)
                if found["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
                    break
                await anyio.sleep(0.05)
        yield name
        await admin.delete_stream(StreamName=name)


@pytest.mark.emulator
async def test_kinesis_delivers_through_an_assumed_role_renewed_mid_run(
    sts_endpoint: str, kinesalite_endpoint: str, stream: str
) -> None:
    before = len(sessions_of())
    options = {
        "streamName": stream,
        "region": "us-east-1",
        "endpointUrl": kinesalite_endpoint,
        "maxTimeInBufferMs": "100",
        "reconcileByReading": "false",
        **ROLE_OPTIONS,
    }
    writer = kinesis_writer(options)
    written = await write_for(writer, 4.0, "kinesis")
    assert writer.statistics().delivered == written
    assert len(sessions_of()[before:]) >= 2  # renewed mid-run


@pytest.mark.emulator
async def test_the_dynamodb_record_store_works_through_an_assumed_role(
    sts_endpoint: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's URL holds no keys: the default chain (here the environment) assumes it.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
    role = "arn:aws:iam::210987654321:role/records"
    before = len(sessions_of(role))
    url = (f"dynamodb://role-records?region=us-east-1&endpoint_url={moto_endpoint}"
           f"&role_arn={role}&external_id=ext-99&role_session_name=records-test")  # fmt: skip
    store = open_store(url)
    scope = Scope("sink", 1, 0)
    try:
        state = await store.take(scope)
        assert state.epoch >= 1
        assert (await store.load(scope)) is not None
    finally:
        await store.aclose()
    sessions = sessions_of(role)[before:]
    assert sessions and sessions[-1].external_id == "ext-99"
    assert sessions[-1].session_name == "records-test"


# ---------------------------------------------------------------------- the default chain


class _ContainerCredentials:
    """A container credentials endpoint (what ECS and EKS Pod Identity serve): each answer
    is new keys that expire in 11 minutes, inside botocore's 15-minute refresh window."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.answers = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                import datetime
                import json

                outer.answers += 1
                expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=11)
                data = json.dumps({
                    "AccessKeyId": f"ASIACONTAINER{outer.answers}",
                    "SecretAccessKey": f"container-secret-{outer.answers}",
                    "Token": f"container-token-{outer.answers}",
                    "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_the_default_chain_refreshes_a_container_role_before_it_expires(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    endpoint = _ContainerCredentials()
    try:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        port = endpoint.server.server_port
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"http://127.0.0.1:{port}/creds")
        source = CredentialSource(AwsIdentity())
        first = await source.current()
        second = await source.current()  # 11 minutes left: botocore refreshes ahead
        assert first.access_key.startswith("ASIACONTAINER")
        assert second.access_key != first.access_key and endpoint.answers >= 2
        assert second.token and second.token.startswith("container-token-")
    finally:
        endpoint.close()
