"""Issue 14, item 5: the views of `p2panda_api` as a real PostGraphile (v4, from npm)
serves them. Their smart comments give each view a primary key (`_instance_id`) and a
foreign key per single relation, so an app fetches one slothmail by its instance id and
follows its recipient to the profile; the schema's description stays the type's, and an
author's description adds no tag. PostGraphile connects as an API role (`panda api-role`,
issue 49), which reads the views, also those made again after it was created, and
nothing else."""

from __future__ import annotations

import fcntl
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from p2panda_assets.store.views import smart_comment
from tests.coordination.story import Panda, Story, ok, panda_runner, write_story
from tests.postgres import throwaway_role

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "postgraphile-4"  # gitignored; kept between sessions
PACKAGE = "postgraphile@4"
START_TIMEOUT = 90.0  # seconds for PostGraphile to introspect and listen
DESCRIPTION = "Send slothmail to your friends!"

RECIPIENT = (
    "profileByRecipient { _instanceId name slothmailsByRecipient { nodes { _instanceId } } }"
)


def mail_query(selection: str) -> str:
    """One slothmail by its instance id: some columns and `selection`."""
    return (
        "query ($id: String!) { slothmailByInstanceId(_instanceId: $id) {"
        f" _instanceId subject recipient {selection} }} }}"
    )


TYPE = "query ($name: String!) { __type(name: $name) { description fields { name } } }"
TABLE = "SELECT table_name FROM p2panda.schemas WHERE name = 'slothmail'"


@pytest.fixture(scope="session")
def postgraphile_modules() -> Path:
    """`node_modules` with PostGraphile v4, installed with npm into `.cache/` once."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: PostGraphile (v4, from npm) cannot be run")
    CACHE.mkdir(parents=True, exist_ok=True)
    modules = CACHE / "node_modules"
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing it
        if _installed_major(modules) != 4 or not (modules / ".bin" / "postgraphile").exists():
            subprocess.run(
                [npm, "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", PACKAGE],
                check=True,
                capture_output=True,
                timeout=600,
            )
    assert _installed_major(modules) == 4
    return modules


def _installed_major(modules: Path) -> int | None:
    package = modules / "postgraphile" / "package.json"
    if not package.exists():
        return None
    return int(json.loads(package.read_text())["version"].split(".")[0])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class GraphQL:
    """A running PostGraphile's endpoint."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log

    def __call__(self, query: str, **variables: object) -> dict:
        """The `data` of a query; fails with PostGraphile's errors and log otherwise."""
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(
            self.url, body, {"Content-Type": "application/json", "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:  # a query that does not validate: 400
            answer = json.loads(error.read())
        assert "errors" not in answer, f"{answer['errors']}\n{self.log.read_text()}"
        return answer["data"]

    def fields(self, type_name: str) -> tuple[str | None, list[str]]:
        """(description, field names) of a GraphQL type."""
        found = self(TYPE, name=type_name)["__type"]
        assert found is not None, f"no type {type_name}"
        return found["description"], [field["name"] for field in found["fields"]]


@contextmanager
def postgraphile(modules: Path, database_url: str, log: Path) -> Iterator[GraphQL]:
    """`postgraphile -c URL --schema p2panda_api` on a free loopback port, until exit."""
    port = _free_port()
    argv = [str(modules / ".bin" / "postgraphile"), "-c", database_url]
    argv += ["--schema", "p2panda_api", "--port", str(port), "--host", "127.0.0.1"]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    client = GraphQL(f"http://127.0.0.1:{port}/graphql", log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert process.poll() is None, f"PostGraphile exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"PostGraphile did not start:\n{log.read_text()}"
            try:
                client("{ __typename }")
                break
            except (urllib.error.URLError, ConnectionError):  # not listening yet
                time.sleep(0.5)
        yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def panda(
    spark: SparkSession,
    conn: psycopg.Connection,
    p2panda_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Panda:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return panda_runner(capsys)


@pytest.fixture
def role(database_url: str) -> Iterator[str]:
    yield from throwaway_role(database_url)


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.e2e
def test_a_slothmail_by_its_instance_id_and_its_recipients_profile(
    postgraphile_modules: Path,  # first: without npm, skip before Spark starts
    panda: Panda,
    conn: psycopg.Connection,
    role: str,
    tmp_path: Path,
) -> None:
    # The story with its revert (slothmail version 5): beside recipient, a single relation
    # to profile, the lens shows attachments again, a relation[] to attachment.
    story: Story = write_story(tmp_path / "scratch")
    story.revert()
    story.serve(panda)
    mail, sloth = story.ids["with attachment"], story.ids["sloth"]
    rows = {row[0] for row in conn.execute("SELECT _instance_id FROM p2panda_api.slothmail")}
    app_url = ok(panda("api-role", role)).splitlines()[-1]  # the app's role: views only
    with psycopg.connect(app_url) as app, pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(f"SELECT * FROM {conn.execute(TABLE).fetchone()[0]}")

    with postgraphile(postgraphile_modules, app_url, tmp_path / "plain.log") as graphql:
        found = graphql(mail_query(RECIPIENT), id=mail)["slothmailByInstanceId"]
        assert {k: found[k] for k in ("_instanceId", "subject", "recipient")} == {
            "_instanceId": mail,
            "subject": "A photo",
            "recipient": sloth,
        }
        profile = found["profileByRecipient"]
        assert (profile["_instanceId"], profile["name"]) == (sloth, "sloth")
        back = {node["_instanceId"] for node in profile["slothmailsByRecipient"]["nodes"]}
        assert back == rows  # every mail of the story is sent to the sloth
        nodes = graphql("{ allSlothmails { nodes { _instanceId } } }")["allSlothmails"]["nodes"]
        assert {node["_instanceId"] for node in nodes} == rows and len(nodes) == len(rows)
        description, fields = graphql.fields("Slothmail")
        assert description == DESCRIPTION
        assert "attachments" in fields
        assert [f for f in fields if "By" in f] == ["profileByRecipient"]  # not the array's
        assert graphql('{ slothmailByInstanceId(_instanceId: "00") { subject } }') == {
            "slothmailByInstanceId": None
        }

    # The profile registered under a name with a space and an apostrophe: the foreign key
    # names its view quoted, and PostGraphile reads it back.
    author_hex, log_id = story.author.schema_id("profile").rsplit("-", 1)
    ok(panda("register", author_hex, log_id, "--name", "sloth's profile page"))
    with postgraphile(postgraphile_modules, app_url, tmp_path / "quoted.log") as graphql:
        _, fields = graphql.fields("Slothmail")
        relation = [f for f in fields if f.endswith("ByRecipient")]
        assert len(relation) == 1
        found = graphql(mail_query(f"{relation[0]} {{ name }}"), id=mail)
        assert found["slothmailByInstanceId"][relation[0]] == {"name": "sloth"}

    # A name a smart tag cannot carry (PostGraphile's spec splits on parentheses): no
    # foreign key, and the API still builds, with the primary key.
    ok(panda("register", author_hex, log_id, "--name", "profile (v1)"))
    with postgraphile(postgraphile_modules, app_url, tmp_path / "untaggable.log") as graphql:
        _, fields = graphql.fields("Slothmail")
        assert [f for f in fields if "By" in f] == []
        found = graphql(mail_query(""), id=mail)
        assert found["slothmailByInstanceId"]["recipient"] == sloth


HOSTILE_DESCRIPTIONS = [
    "@omit",
    "\n@omit",
    "\n\n@name hijacked\nreal text",
    "\r\n@foreignKey (recipient) references entries (hash)",
    "  @omit create,update",
    "first line\n@omit\r\n@primaryKey subject",
]


@pytest.mark.e2e
def test_postgraphiles_own_parser_reads_only_our_tags(postgraphile_modules: Path) -> None:
    """graphile-build-pg's `parseTags`, run by node, on the comments views get."""
    node = shutil.which("node") or shutil.which("nodejs")
    assert node is not None, "npm is installed, node is not"
    comments = [
        smart_comment(True, [("recipient", "sloth's profile page")], description)
        for description in HOSTILE_DESCRIPTIONS
    ]
    script = (
        "const { parseTags } = require(process.argv[1]); let input = '';"
        " process.stdin.on('data', (d) => (input += d)).on('end', () =>"
        " console.log(JSON.stringify(JSON.parse(input).map(parseTags))));"
    )
    parsed = json.loads(
        subprocess.run(
            [node, "-e", script, str(postgraphile_modules / "graphile-build-pg")],
            input=json.dumps(comments),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    for description, result in zip(HOSTILE_DESCRIPTIONS, parsed, strict=True):
        assert result["tags"] == {
            "primaryKey": "_instance_id",
            "foreignKey": '("recipient") references "sloth\'s profile page" (_instance_id)',
        }, description
        shown = description.lstrip("\r\n").replace("\r\n", "\n")  # lines joined by \n
        assert result["text"].replace("\\", "") == shown, description
