"""The asset checks pass on a clean corpus materialized through Dagster, and fail, saying
why, once its Parquet, table or accounts are tampered with (the pipeline never writes
bad data, so violations are made by hand after a materialization and undone after)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster_pyspark import PySparkResource

from p2panda_assets.defs.assets import family
from p2panda_assets.defs.checks import (
    KINDS,
    checks,
    decoded_messages_match_their_model,
    entries_are_accounted,
    table_matches_the_current_lens,
)
from p2panda_assets.defs.resources import PostgresResource
from p2panda_assets.pipeline.spark.session import spark_config
from p2panda_assets.store.checked_layers import checked_layers, forget_checked_layers
from p2panda_assets.store.database import DATABASE_URL_ENV, connect, ensure_schema
from p2panda_assets.store.registry import table_name_for
from p2panda_assets.store.views import create_views, drop_views
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances, update_field
from tests.automation.store import publish, register_schemas

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SUBJECT = r"^[^#\r\n].*$"


@dataclass
class Store:
    url: str
    instance: dg.DagsterInstance
    resources: dict[str, object]
    profile: str
    mail: str
    runs: dict[str, dg.ExecuteInProcessResult]
    last: dg.ExecuteInProcessResult | None = None

    def connect(self) -> psycopg.Connection:
        return connect(self.url, autocommit=True)

    def run_check(self, check: dg.AssetChecksDefinition, schema_id: str):
        """`check` on the stored partition. A run of checks alone cannot name a partition
        (Dagster finds no partitions definition without an asset), so the run also folds
        the plan again: no Spark, and what the table check derives its model from."""
        result = dg.materialize(
            [*family, *checks],
            selection=dg.AssetSelection.assets("migration_plan") | dg.AssetSelection.checks(check),
            partition_key=schema_id,
            instance=self.instance,
            resources=self.resources,
            raise_on_error=False,
        )
        self.last = result
        [evaluation] = result.get_asset_check_evaluations()
        return evaluation


def mail_corpus() -> tuple[list[tuple[bytes, bytes]], str, str]:
    """profile(name varchar, tags varchar[]) <- mail(subject text, to relation cascade).
    mail's subject gets a validation at version 3: an old multi-line subject falls back
    to `<Subject>`, and a new `#...` subject is rejected (validation-failed)."""
    corpus = CorpusBuilder()
    owner = corpus.author(11)
    profile = owner.schema(60, "profile")
    profile.migrate(create_field("name", "varchar"), create_field("tags", "varchar[]"))
    mail = owner.schema(61, "mail")
    mail.migrate(
        create_field("subject", "text"),
        create_field("to", "relation", schema=profile.log_ref, cascade=True),
    )
    people = instances(corpus.author(12), 1)
    panda = people.create(profile.ref(), name="panda", tags=("bamboo", "naps"))
    letters = instances(corpus.author(13), 1)
    letters.create(mail.ref(), subject="first\nline", to=panda)
    mail.migrate(update_field("subject", "text", "<Subject>", validation=SUBJECT))
    letters.create(mail.ref(), subject="hello", to=panda)
    letters.create(mail.ref(), subject="#not a subject", to=panda)
    return corpus.pairs, profile.schema_id, mail.schema_id


@pytest.fixture(scope="module")
def store(spark, session_database: str, tmp_path_factory) -> Iterator[Store]:
    """The corpus materialized through Dagster, profile then mail, once per module."""
    with pytest.MonkeyPatch.context() as env, dg.instance_for_test() as instance:
        env.setenv("P2PANDA_HOME", str(tmp_path_factory.mktemp("home")))
        env.setenv(DATABASE_URL_ENV, session_database)
        with connect(session_database, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS p2panda CASCADE")
            conn.execute("DROP SCHEMA IF EXISTS p2panda_data CASCADE")
            ensure_schema(conn)
            pairs, profile, mail = mail_corpus()
            publish(conn, pairs)
            register_schemas(conn, profile, mail)
        instance.add_dynamic_partitions("schemas", [profile, mail])
        resources = {
            "postgres": PostgresResource(url=session_database),
            "pyspark": PySparkResource(spark_config=spark_config("local[2]")),
        }
        runs = {
            schema_id: dg.materialize(
                [*family, *checks], partition_key=schema_id, instance=instance, resources=resources
            )
            for schema_id in (profile, mail)
        }
        yield Store(session_database, instance, resources, profile, mail, runs)


def evaluations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_clean_corpus_passes_every_check(store: Store) -> None:
    for schema_id in (store.profile, store.mail):
        found = evaluations(store.runs[schema_id])
        assert set(found) == {c.check_key.name for c in checks}
        assert {name: e.passed for name, e in found.items()} == dict.fromkeys(found, True), {
            name: e.description for name, e in found.items()
        }


def test_accounting_counts_rejections_by_reason(store: Store) -> None:
    metadata = evaluations(store.runs[store.mail])["entries_are_accounted"].metadata
    assert metadata["rejected_by_reason"].value == {"validation-failed": 1}
    assert metadata["stored"].value == 3 + 3  # schema log (meta, 2 migrations), 3 letters
    assert metadata["applied"].value + metadata["superseded"].value == 5
    # The rejected entry by name, in the columns `panda status --rejected` shows; ingested
    # by the library, not from a file, it has no `from`.
    (record,) = metadata["rejected_entries"].value.records
    assert record.data["reason"] == "validation-failed"
    assert len(record.data["hash"]) == 68 and record.data["from"] is None
    assert (record.data["log"], record.data["message"] is not None) == (1, True)
    assert metadata["rejected_entries_shown"].value == "1 of 1"


def test_checks_that_guard_data_flowing_on_are_blocking() -> None:
    blocking = {c.check_key.name: next(iter(c.check_specs)).blocking for c in checks}
    assert blocking == {
        "decoded_messages_match_their_model": True,
        "table_matches_the_current_lens": True,
        "entries_are_accounted": False,
    }


# --- crafted violations ---------------------------------------------------------------------


def local_decoded_path(url: str, schema_id: str) -> Path:
    """Where the index step wrote the schema's chained messages (a local path; the store
    here is indexed once, in one layer)."""
    from p2panda_assets.pipeline.columnar.layers import decoded_paths
    from p2panda_assets.pipeline.spark.session import build_session

    with connect(url, autocommit=True) as conn:
        (found,) = decoded_paths(build_session(), conn, schema_id)
    return Path(found)


@contextmanager
def tampered_parquet(store: Store, schema_id: str, tamper) -> Iterator[None]:
    """The decoded Parquet rewritten by `tamper(table) -> table`, as a layer the check
    has not passed yet (it reads no other), restored afterwards."""
    with store.connect() as conn:
        forget_checked_layers(conn, schema_id)
    path = local_decoded_path(store.url, schema_id)
    saved = path.with_name(path.name + ".saved")
    shutil.copytree(path, saved)
    table = pq.read_table(path)
    shutil.rmtree(path)
    path.mkdir()
    pq.write_table(tamper(table), Path(path) / "part-0.parquet")
    try:
        yield
    finally:
        shutil.rmtree(path)
        saved.rename(path)


@pytest.fixture(params=["driver", "spark"])
def checked_in(request: pytest.FixtureRequest, tune) -> str:
    """The decoded check both ways: its few new messages read by pyarrow and checked with
    pandera's pandas backend (the default for a live run's), or in Spark (the driver
    path turned off); the same findings either way."""
    if request.param == "spark":
        tune(driver_path_entries=-1)
    return request.param


def test_the_decoded_parquet_is_written_as_it_is_read(store: Store) -> None:
    """Layers are read with `DECODED_SPARK` imposed, not with the schema their files
    hold: the index step must write exactly those columns and types."""
    from p2panda_assets.pipeline.columnar.layers import DECODED_SPARK
    from p2panda_assets.pipeline.spark.session import build_session

    written = build_session().read.parquet(str(local_decoded_path(store.url, store.mail)))
    assert [(f.name, f.dataType) for f in written.schema.fields] == [
        (f.name, f.dataType) for f in DECODED_SPARK.fields
    ]


def test_the_decoded_check_reads_only_layers_it_has_not_passed(
    store: Store, checked_in: str
) -> None:
    """Layers never change once written: after a pass, the check reads none of them
    again, until its record is gone (or new layers come)."""
    again = store.run_check(decoded_messages_match_their_model, store.mail)
    assert again.passed
    assert again.metadata["layers_read"].value == 0
    assert again.metadata["layers_passed_before"].value == 1
    with store.connect() as conn:
        forget_checked_layers(conn, store.mail)
    fresh = store.run_check(decoded_messages_match_their_model, store.mail)
    assert fresh.passed
    assert fresh.metadata["checked_in"].value == checked_in
    assert fresh.metadata["layers_read"].value == 1
    assert fresh.metadata["rows"].value == 6  # the schema log's 3 entries and 3 letters
    with store.connect() as conn:
        assert checked_layers(conn, store.mail) == {
            local_decoded_path(store.url, store.mail).parent.name
        }


def _replace(table: pa.Table, column: str, values: list) -> pa.Table:
    index = table.schema.get_field_index(column)
    return table.set_column(index, column, pa.array(values, table.schema.field(column).type))


def test_decoded_check_fails_on_bad_hashes_seqs_and_kinds(store: Store, checked_in: str) -> None:
    def tamper(table: pa.Table) -> pa.Table:
        hashes = table.column("hash").to_pylist()
        seqs = table.column("seq").to_pylist()
        kinds = table.column("kind").to_pylist()
        hashes[0] = hashes[0][:10]
        seqs[1] = type(seqs[1])(0)
        kinds[2] = "bogus"
        table = _replace(table, "hash", hashes)
        return _replace(_replace(table, "seq", seqs), "kind", kinds)

    with tampered_parquet(store, store.mail, tamper):
        evaluation = store.run_check(decoded_messages_match_their_model, store.mail)
    assert not evaluation.passed
    assert evaluation.metadata["checked_in"].value == checked_in
    assert "hash: hash_is_34_or_66_bytes" in evaluation.description
    assert "seq: greater_than_or_equal_to(1)" in evaluation.description
    assert "kind: isin" in evaluation.description
    assert evaluation.metadata["failing_rows"].value == {
        "hash: hash_is_34_or_66_bytes": 1,
        "seq: greater_than_or_equal_to(1)": 1,
        f"kind: isin({list(KINDS)})": 1,
    }
    assert store.last.get_asset_materialization_events() == []  # blocked: no plan
    assert store.run_check(decoded_messages_match_their_model, store.mail).passed


def test_the_decoded_check_says_the_same_in_the_driver_and_in_spark(store: Store, tune) -> None:
    """Every finding at once (a short hash, a seq 0, a bogus kind, a null author, a
    message in neither form, a repeated entry): both backends give the same description,
    the same failing rows and the same metadata, but for where it ran."""

    def tamper(table: pa.Table) -> pa.Table:
        hashes, seqs = table.column("hash").to_pylist(), table.column("seq").to_pylist()
        kinds, authors = table.column("kind").to_pylist(), table.column("author").to_pylist()
        hashes[0], seqs[1], kinds[2], authors[3] = hashes[0][:10], type(seqs[1])(0), "bogus", None
        table = _replace(_replace(table, "hash", hashes), "seq", seqs)
        table = _replace(_replace(table, "kind", kinds), "author", authors)
        for column in ("payload", "message"):
            values = table.column(column).to_pylist()
            values[4] = None
            table = _replace(table, column, values)
        return pa.concat_tables([table, table.slice(5, 1)])

    results = []
    with tampered_parquet(store, store.mail, tamper):
        results.append(store.run_check(decoded_messages_match_their_model, store.mail))
        tune(driver_path_entries=-1)
        results.append(store.run_check(decoded_messages_match_their_model, store.mail))
    driver, spark = results
    assert [r.metadata["checked_in"].value for r in results] == ["driver", "spark"]
    assert not driver.passed and not spark.passed
    assert driver.description == spark.description
    shown = {k: v.value for k, v in driver.metadata.items() if k != "checked_in"}
    assert shown == {k: v.value for k, v in spark.metadata.items() if k != "checked_in"}
    assert len(driver.metadata["failing_rows"].value) == 7


def test_decoded_check_fails_on_a_message_with_neither_kind_nor_error(
    store: Store, checked_in: str
) -> None:
    def tamper(table: pa.Table) -> pa.Table:
        kinds = table.column("kind").to_pylist()
        kinds[0] = None
        return _replace(table, "kind", kinds)

    with tampered_parquet(store, store.mail, tamper):
        evaluation = store.run_check(decoded_messages_match_their_model, store.mail)
    assert not evaluation.passed
    assert evaluation.metadata["checked_in"].value == checked_in
    assert "kind_xor_error" in evaluation.description
    assert evaluation.metadata["failing_rows"].value == {"kind_xor_error": 1}


def test_decoded_check_fails_on_nulls_and_repeated_entries(store: Store, checked_in: str) -> None:
    """Nullability and uniqueness are counted like every other check."""

    def tamper(table: pa.Table) -> pa.Table:
        authors = table.column("author").to_pylist()
        authors[1] = None
        table = _replace(table, "author", authors)
        for column in ("payload", "message"):  # the message, in neither form
            values = table.column(column).to_pylist()
            values[2] = None
            table = _replace(table, column, values)
        return pa.concat_tables([table, table.slice(0, 1)])

    with tampered_parquet(store, store.mail, tamper):
        evaluation = store.run_check(decoded_messages_match_their_model, store.mail)
    assert not evaluation.passed
    assert evaluation.metadata["checked_in"].value == checked_in
    assert evaluation.metadata["failing_rows"].value == {
        "author: not_nullable": 1,
        "payload_or_message": 1,
        "hash_unique": 1,
        "entry_unique": 1,
    }
    assert "author: not_nullable" in evaluation.description


@contextmanager
def tampered_table(store: Store, *statements: str, undo: tuple[str, ...]) -> Iterator[None]:
    """The statements applied, then undone; the views by name (which would forbid
    altering a column's type) dropped meanwhile."""
    with store.connect() as conn:
        drop_views(conn)
        for statement in statements:
            conn.execute(statement)
        try:
            yield
        finally:
            for statement in undo:
                conn.execute(statement)
            create_views(conn)


def test_table_check_fails_on_a_varchar_longer_than_255(store: Store) -> None:
    """The column's type altered to text lets a 300-character name in."""
    table = table_name_for(store.profile)
    row = f"'{'ab' * 34}', '{'cd' * 32}', 2, 9, '{'ef' * 34}'"
    with tampered_table(
        store,
        f"ALTER TABLE {table} ALTER COLUMN name TYPE text",
        f"INSERT INTO {table} (_instance_id, _author, _version, _seq, _entry, name)"
        f" VALUES ({row}, '{'x' * 300}')",
        undo=(
            f"DELETE FROM {table} WHERE _instance_id = '{'ab' * 34}'",
            f"ALTER TABLE {table} ALTER COLUMN name TYPE varchar(255)",
        ),
    ):
        evaluation = store.run_check(table_matches_the_current_lens, store.profile)
    assert not evaluation.passed
    assert "name: declared text, expected character varying(255)" in evaluation.description
    assert "name: varchar_at_most_255" in evaluation.description
    assert evaluation.metadata["failing_rows"].value == {"name: varchar_at_most_255": 1}


def test_table_check_fails_on_an_invalid_value_at_the_current_version(store: Store) -> None:
    table = table_name_for(store.mail)
    with tampered_table(
        store,
        f"UPDATE {table} SET subject = '# hash' WHERE subject = 'hello'",
        undo=(f"UPDATE {table} SET subject = 'hello' WHERE subject = '# hash'",),
    ):
        evaluation = store.run_check(table_matches_the_current_lens, store.mail)
    assert not evaluation.passed
    assert "subject: validation_at_current_version" in evaluation.description


def test_table_check_validates_only_values_written_at_the_current_version(store: Store) -> None:
    """A value at an older (alive) version is what the migration made of it: the check
    leaves it to the migration rules (rule C-VALIDATE: validation applies at the current
    version)."""
    table = table_name_for(store.mail)
    with tampered_table(
        store,
        f"UPDATE {table} SET subject = '# old', _version = 2 WHERE subject = 'hello'",
        undo=(f"UPDATE {table} SET subject = 'hello', _version = 3 WHERE subject = '# old'",),
    ):
        assert store.run_check(table_matches_the_current_lens, store.mail).passed


def test_table_check_fails_on_a_null_system_column_and_a_dead_version(store: Store) -> None:
    table = table_name_for(store.mail)
    with tampered_table(
        store,
        f"ALTER TABLE {table} ALTER COLUMN _author DROP NOT NULL",
        f"UPDATE {table} SET _author = NULL, _version = 99 WHERE subject = 'hello'",
        undo=(
            f"UPDATE {table} SET _author = '{_letter_author()}', _version = 3"
            " WHERE subject = 'hello'",
            f"ALTER TABLE {table} ALTER COLUMN _author SET NOT NULL",
        ),
    ):
        evaluation = store.run_check(table_matches_the_current_lens, store.mail)
    assert not evaluation.passed
    assert "_author: declared nullable, expected NOT NULL" in evaluation.description
    assert "_author: not_nullable" in evaluation.description
    assert "_version: isin" in evaluation.description


def primary_key(store: Store, table: str) -> str:
    """The name of `table`'s primary key constraint (a test drops it to let a row repeat)."""
    with store.connect() as conn:
        [key] = conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
            (table,),
        ).fetchone()
    return key


def test_table_check_fails_on_a_repeated_instance_and_a_seq_below_one(store: Store) -> None:
    """Without its primary key the table takes a second row of an instance; uniqueness,
    nullability and ranges are counted like every other check."""
    table = table_name_for(store.mail)
    key = primary_key(store, table)
    with tampered_table(
        store,
        f"ALTER TABLE {table} DROP CONSTRAINT {key}",
        f'INSERT INTO {table} (_instance_id, _author, _version, _seq, _entry, subject, "to")'
        f' SELECT _instance_id, _author, _version, 0, _entry, subject, "to" FROM {table}'
        " WHERE subject = 'hello'",
        undo=(
            f"DELETE FROM {table} WHERE _seq = 0",
            f"ALTER TABLE {table} ADD CONSTRAINT {key} PRIMARY KEY (_instance_id)",
        ),
    ):
        evaluation = store.run_check(table_matches_the_current_lens, store.mail)
    assert not evaluation.passed
    assert evaluation.metadata["failing_rows"].value == {
        "instance_id_unique": 1,
        "_seq: greater_than_or_equal_to(1)": 1,
    }
    assert "instance_id_unique" in evaluation.description


def test_the_table_check_says_the_same_in_the_driver_and_in_spark(store: Store, tune) -> None:
    """Every finding at once, in both tables (an id that is not hex, a dead version, a
    seq 0, a relation that is no instance id, a repeated instance whose subject fails its
    validation at the current version, a null array element): both backends give the
    same description, the same failing rows and the same metadata, but for where it ran."""
    mail, profile = table_name_for(store.mail), table_name_for(store.profile)
    key = primary_key(store, mail)
    with tampered_table(
        store,
        f"ALTER TABLE {mail} DROP CONSTRAINT {key}",
        f'INSERT INTO {mail} (_instance_id, _author, _version, _seq, _entry, subject, "to")'
        f" SELECT 'NOT HEX', _author, 99, 0, _entry, '# bad', 'nowhere' FROM {mail}"
        " WHERE subject = 'hello'",
        f'INSERT INTO {mail} (_instance_id, _author, _version, _seq, _entry, subject, "to")'
        f" SELECT _instance_id, _author, _version, _seq, _entry, '# dup', \"to\" FROM {mail}"
        " WHERE subject = 'hello'",
        f"UPDATE {profile} SET tags = ARRAY['bamboo', NULL]",
        undo=(
            f"DELETE FROM {mail} WHERE _seq = 0 OR subject = '# dup'",
            f"ALTER TABLE {mail} ADD CONSTRAINT {key} PRIMARY KEY (_instance_id)",
            f"UPDATE {profile} SET tags = ARRAY['bamboo', 'naps']",
        ),
    ):
        results = {}
        for schema_id in (store.mail, store.profile):
            results[schema_id, "driver"] = store.run_check(
                table_matches_the_current_lens, schema_id
            )
        tune(driver_path_entries=-1)
        for schema_id in (store.mail, store.profile):
            results[schema_id, "spark"] = store.run_check(table_matches_the_current_lens, schema_id)
    for schema_id in (store.mail, store.profile):
        driver, spark = results[schema_id, "driver"], results[schema_id, "spark"]
        assert (driver.metadata["checked_in"].value, spark.metadata["checked_in"].value) == (
            "driver",
            "spark",
        )
        assert not driver.passed and driver.description == spark.description
        shown = {k: v.value for k, v in driver.metadata.items() if k != "checked_in"}
        assert shown == {k: v.value for k, v in spark.metadata.items() if k != "checked_in"}
    assert results[store.mail, "driver"].metadata["failing_rows"].value == {
        "instance_id_unique": 1,
        "_instance_id: instance_id_is_hex": 1,
        "_version: isin([1, 2, 3])": 1,
        "_seq: greater_than_or_equal_to(1)": 1,
        "to: relation_is_an_instance_id": 1,
        "subject: validation_at_current_version": 1,
    }
    assert results[store.profile, "driver"].metadata["failing_rows"].value == {
        "tags: no_null_elements": 1
    }


def _letter_author() -> str:
    return CorpusBuilder().author(13).key_pair.public_key.hex()


def test_accounting_check_fails_on_an_entry_without_account(store: Store) -> None:
    with store.connect() as conn:
        row = conn.execute(
            "SELECT hash, schema_id, state, reason, message, origin FROM p2panda.accounts"
            " WHERE schema_id = %s AND state = 'rejected'",
            (store.mail,),
        ).fetchone()
        conn.execute("DELETE FROM p2panda.accounts WHERE hash = %s", (row[0],))
        try:
            evaluation = store.run_check(entries_are_accounted, store.mail)
        finally:
            conn.execute("INSERT INTO p2panda.accounts VALUES (%s, %s, %s, %s, %s, %s)", row)
    assert not evaluation.passed
    assert "1 stored entries of the schema's logs have no account" in evaluation.description
    assert "= 5, but 6 verified entries are stored" in evaluation.description
    assert evaluation.metadata["rejected_by_reason"].value == {}


def test_accounting_check_counts_an_entry_not_verified_yet_apart(store: Store) -> None:
    """An entry ingested after the last index step has no verdict and no account yet: it
    is counted as unverified, not as missing, and the check passes."""
    with store.connect() as conn:
        (newest,) = conn.execute(
            "SELECT max(e.ingest_seq) FROM p2panda.entries e JOIN p2panda.logs l"
            " ON l.author = e.author AND l.log_id = e.log_id WHERE l.schema_id = %s",
            (store.mail,),
        ).fetchone()
        (through,) = conn.execute("SELECT verified_through FROM p2panda.pipeline_state").fetchone()
        row = conn.execute(
            "SELECT a.hash, a.schema_id, a.state, a.reason, a.message, a.origin"
            " FROM p2panda.accounts a JOIN p2panda.entries e ON e.hash = a.hash"
            " WHERE e.ingest_seq = %s",
            (newest,),
        ).fetchone()
        conn.execute("DELETE FROM p2panda.accounts WHERE hash = %s", (row[0],))
        conn.execute("UPDATE p2panda.pipeline_state SET verified_through = %s", (newest - 1,))
        try:
            evaluation = store.run_check(entries_are_accounted, store.mail)
        finally:
            conn.execute("UPDATE p2panda.pipeline_state SET verified_through = %s", (through,))
            conn.execute("INSERT INTO p2panda.accounts VALUES (%s, %s, %s, %s, %s, %s)", row)
    assert evaluation.passed, evaluation.description
    assert (evaluation.metadata["stored"].value, evaluation.metadata["unverified"].value) == (5, 1)


def test_accounting_check_fails_on_an_entry_accounted_to_another_schema(store: Store) -> None:
    with store.connect() as conn:
        conn.execute(
            "UPDATE p2panda.accounts SET schema_id = %s WHERE schema_id = %s"
            " AND state = 'rejected'",
            (store.profile, store.mail),
        )
        try:
            evaluation = store.run_check(entries_are_accounted, store.mail)
            holder = store.run_check(entries_are_accounted, store.profile)
        finally:
            conn.execute(
                "UPDATE p2panda.accounts SET schema_id = %s WHERE schema_id = %s"
                " AND state = 'rejected'",
                (store.mail, store.profile),
            )
    assert not evaluation.passed
    assert "1 entries of the schema's logs are accounted to another schema" in (
        evaluation.description
    )
    assert "have no account" not in (evaluation.description or "")
    # The schema that holds it has an account of an entry not on its logs.
    assert not holder.passed
    assert "1 accounts of the schema are for entries not on its logs" in (holder.description or "")
