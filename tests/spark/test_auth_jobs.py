"""Every authentication option through Spark: each kind through the data source
(``format("asyncsink-http")``, ``format("asyncsink-elasticsearch")``) and through
``foreach_partition``, against the local servers that check it; a 30-second OAuth2 job
with 2-second tokens; and wrong options refused on the driver before any task starts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from asyncsink import OptionError
from asyncsink.spark import foreach_partition
from asyncsink.testing import Faults, FaultServer
from asyncsink.testing.sigv4 import SigV4Check
from tests.servers.elasticsearch import ElasticsearchServer
from tests.servers.mtls import MtlsServer, make_pki
from tests.servers.oauth2 import OAuth2Server
from tests.servers.sts import secret_of

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

KEY, SECRET = "AKIDSPARKSIGV4", "spark-sigv4-secret"
KEYS = {"awsAccessKeyId": KEY, "awsSecretAccessKey": SECRET}
ROLE = {"awsRoleArn": "arn:aws:iam::210987654321:role/spark-writer", "awsExternalId": "x-77",
        "awsRoleSessionName": "spark-job", "awsRoleDurationMs": "3s", **KEYS}  # fmt: skip
CLIENT = {"oauth2ClientId": "spark-job", "oauth2ClientSecret": "spark-client-secret"}
ENTRIES = ["datasource", "foreach"]


def rows(spark: Any, count: int, partitions: int = 2) -> Any:
    return (
        spark.range(count).selectExpr("concat('r-', id) AS id", "id AS v").repartition(partitions)
    )


def write(entry: str, df: Any, sink: str, options: dict[str, str]) -> None:
    if entry == "datasource":
        df.write.format(f"asyncsink-{sink}").options(**options).mode("append").save()
    else:
        foreach_partition(df, sink, options)


FAST = {"maxBatchSize": "50", "initialBackoffMs": "1", "maxBackoffMs": "50"}


@pytest.fixture(scope="module")
def signing(sts_endpoint: str) -> Iterator[FaultServer]:
    check = SigV4Check("execute-api", "us-east-1", keys=((KEY, SECRET),), secret_for=secret_of)
    with FaultServer(sigv4=check, in_thread=True) as server:
        yield server


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("how", ["keys", "role"])
def test_sigv4_with_gzip_and_faults_delivers_every_row(
    spark: Any, signing: FaultServer, entry: str, how: str
) -> None:
    signing.reset()
    signing.set_faults(Faults(error_rate=0.1, seed=3))
    keys = {**KEYS, "awsSessionToken": "FwoGZXIvYXdzEJr-spark-token"}
    options = {"url": signing.ingest_url, "awsService": "execute-api", "region": "us-east-1",
               "gzip": "true", **(ROLE if how == "role" else keys), **FAST}  # fmt: skip
    try:
        write(entry, rows(spark, 600), "http", options)
    finally:
        signing.set_faults(Faults())
    stats = signing.stats()
    assert sorted(signing.applied_ids()) == sorted(f"r-{i}" for i in range(600))
    assert stats.statuses.get(403, 0) == 0 and stats.statuses.get(400, 0) == 0


@pytest.mark.emulator
@pytest.mark.parametrize("entry", ENTRIES)
def test_kinesis_delivers_through_an_assumed_role(
    spark: Any, sts_endpoint: str, kinesalite_endpoint: str, entry: str
) -> None:
    import botocore.session

    admin = botocore.session.get_session().create_client(
        "kinesis", region_name="us-east-1", endpoint_url=kinesalite_endpoint,
        aws_access_key_id="admin", aws_secret_access_key="admin",
    )  # fmt: skip
    name = f"role-{entry}-{int(time.time() * 1000) % 100000}"
    admin.create_stream(StreamName=name, ShardCount=1)
    try:
        deadline = time.monotonic() + 30
        while (
            admin.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"][
                "StreamStatus"
            ]
            != "ACTIVE"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        options = {"streamName": name, "region": "us-east-1", "endpointUrl": kinesalite_endpoint,
                   "partitionKeyField": "id", **ROLE, **FAST}  # fmt: skip
        write(entry, rows(spark, 300), "kinesis", options)
        shard = admin.list_shards(StreamName=name)["Shards"][0]["ShardId"]
        iterator = admin.get_shard_iterator(
            StreamName=name, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        assert len(admin.get_records(ShardIterator=iterator, Limit=1000)["Records"]) == 300
    finally:
        admin.delete_stream(StreamName=name)
        admin.close()


@pytest.fixture(scope="module")
def oauth2() -> Iterator[OAuth2Server]:
    with OAuth2Server(client_id="spark-job", client_secret="spark-client-secret") as server:
        yield server


@pytest.mark.parametrize("entry", ENTRIES)
def test_oauth2_delivers_every_row(spark: Any, oauth2: OAuth2Server, entry: str) -> None:
    before = len(oauth2.state.ids)
    options = {"url": f"{oauth2.url}/ingest", "oauth2TokenUrl": f"{oauth2.url}/token",
               "oauth2ClientAuth": "post", "oauth2Scope": "events:write",
               "oauth2Audience": "https://api.example", **CLIENT, **FAST}  # fmt: skip
    write(entry, rows(spark, 400), "http", options)
    assert sorted(oauth2.state.ids[before:]) == sorted(f"r-{i}" for i in range(400))
    form = oauth2.state.forms[-1]
    assert form["scope"] == ["events:write"] and form["audience"] == ["https://api.example"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return make_pki(tmp_path_factory.mktemp("spark-pki"))


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("sink", ["http", "elasticsearch"])
def test_mutual_tls_presents_the_client_certificate(
    spark: Any, pki: dict[str, Any], entry: str, sink: str
) -> None:
    tls = {"caBundle": pki["ca"], "clientCert": pki["cert"], "clientKey": pki["encrypted"],
           "clientKeyPassword": "k3y-pa55/Zq"}  # fmt: skip
    with MtlsServer(pki) as server:
        target = {"url": f"{server.url}/in"} if sink == "http" else {
            "hosts": server.url, "index": "logs"}  # fmt: skip
        write(entry, rows(spark, 200), sink, {**target, **tls, **FAST})
        assert server.subjects and all(s["commonName"] == "spark-job" for s in server.subjects)
        if sink == "http":
            assert sorted(server.ids) == sorted(f"r-{i}" for i in range(200))


@pytest.mark.parametrize("entry", ENTRIES)
def test_opensearch_serverless_signed_with_auto_ids(spark: Any, entry: str) -> None:
    check = SigV4Check("aoss", "us-east-1", keys=((KEY, SECRET),))
    with ElasticsearchServer(in_thread=True, flavor="aoss", sigv4=check) as aoss:
        options = {"hosts": aoss.url, "index": "metrics", "awsService": "aoss",
                   "region": "us-east-1", "autoIds": "true", **KEYS, **FAST}  # fmt: skip
        write(entry, rows(spark, 300), "elasticsearch", options)
        assert len(aoss.documents("metrics")) == 300
        assert 403 not in aoss.stats().responses_by_status


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"awsService": "execute-api"}, "region"),
        ({"clientCert": "/nonexistent/client.pem"}, "clientCert"),
        ({"awsService": "es", "region": "us-east-1", "awsRoleArn": "arn:aws:iam::1:role/x"},
         "awsRoleArn"),
        ({"oauth2TokenUrl": "file:///etc/token", **CLIENT}, "oauth2TokenUrl"),
    ],
)  # fmt: skip
def test_wrong_options_fail_on_the_driver_before_any_task(
    spark: Any, given: dict[str, str], option: str
) -> None:
    df = spark.range(10).selectExpr("concat('r-', id) AS id")  # no shuffle: no job at all
    options = {"url": "http://127.0.0.1:9/in", **given}
    with pytest.raises(OptionError, match=option):
        foreach_partition(df, "http", options)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup(f"refused-{option}", "options refused on the driver")
    try:
        with pytest.raises(Exception, match=option):
            df.write.format("asyncsink-http").options(**options).mode("append").save()
        assert tracker.getJobIdsForGroup(f"refused-{option}") == []  # no task ran
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)


def test_a_30_second_oauth2_job_renews_its_2_second_tokens_without_a_task_failure(
    spark: Any,
) -> None:
    with OAuth2Server(client_id="spark-job", client_secret="spark-client-secret", life_s=2,
                      latency_s=0.12, revoke_every_s=7) as server:  # fmt: skip
        options = {"url": f"{server.url}/ingest", "oauth2TokenUrl": f"{server.url}/token",
                   **CLIENT, "maxBatchSize": "25", "maxInFlightRequests": "1",
                   "adaptiveConcurrency": "false", "initialBackoffMs": "1"}  # fmt: skip
        context = spark.sparkContext
        context.setJobGroup("oauth2-30s", "a long OAuth2 job")
        started = time.monotonic()
        try:
            # 480 requests of 25 rows, one at a time per task, two tasks at once, each
            # answered after 120 ms: at least 29 s.
            write("datasource", rows(spark, 12_000, partitions=4), "http", options)
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)
        took = time.monotonic() - started
        state = server.state
        assert sorted(state.ids) == sorted(f"r-{i}" for i in range(12_000))
        assert took >= 25, f"the job took {took:.0f} s: too short to outlive its tokens"
        assert state.issued >= 5, state.issued  # renewed several times
        assert state.unauthorized >= 1  # revoked tokens were refused, renewed and re-sent
        assert state.refused_clients == 0
        tracker = context.statusTracker()
        for job in tracker.getJobIdsForGroup("oauth2-30s"):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                found = tracker.getStageInfo(stage)
                assert found is None or found.numFailedTasks == 0
