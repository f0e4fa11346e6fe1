"""Issue 14, a quiet command line: stderr carries the product's own lines only (unless
`--verbose`), an unexpected exception is one `error: internal:` line (its traceback with
`--debug`), `panda --help` says what the tool is, and schemas are named by name too."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from p2panda_assets.cli import key_cmd
from p2panda_assets.cli.main import MAX_INTERNAL_MESSAGE, internal_message, main
from p2panda_assets.errors import P2pandaError, Reason
from p2panda_assets.jsonlines import entry_line
from p2panda_assets.testing.builder import CorpusBuilder, create_field, instances

HINT = " (--debug shows the traceback)"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def broken_create_key(*args: object, **kwargs: object) -> None:
    raise KeyError("boom")


# --- unexpected exceptions ------------------------------------------------------------


def test_an_unexpected_exception_is_one_internal_error_line(
    capsys, monkeypatch: pytest.MonkeyPatch, p2panda_home: Path
) -> None:
    monkeypatch.setattr(key_cmd, "create_key", broken_create_key)
    code, out, err = run(capsys, "key", "new")
    assert (code, out) == (1, "")
    assert err == f"error: internal: KeyError: 'boom'{HINT}\n"


@pytest.mark.parametrize(
    "argv", [("--debug", "key", "new"), ("key", "new", "--debug"), ("key", "--debug", "new")]
)
def test_with_debug_the_traceback_is_shown(
    capsys, monkeypatch: pytest.MonkeyPatch, p2panda_home: Path, argv: tuple[str, ...]
) -> None:
    monkeypatch.setattr(key_cmd, "create_key", broken_create_key)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert any("in broken_create_key" in line for line in lines)
    assert lines[-2:] == ["KeyError: 'boom'", "error: internal: KeyError: 'boom'"]


def test_with_debug_a_typed_error_shows_its_traceback_too(capsys, p2panda_home: Path) -> None:
    code, _, err = run(capsys, "--debug", "schema", "note", "init")
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith(
        "\nerror: no-key: no key at " + str(p2panda_home / "author.key") + ": run `panda key new`\n"
    )


def test_the_installed_command_prints_one_internal_line(tmp_path: Path) -> None:
    """A real process: fd 2 and sys.stderr as a terminal session has them. The home's
    parent is a file, so `panda key new` fails where no typed error expects it to."""
    home = tmp_path / "not-a-directory"
    home.write_text("")
    panda = Path(sys.executable).parent / "panda"
    env = {**os.environ, "P2PANDA_HOME": str(home / "inner")}
    quiet = subprocess.run([str(panda), "key", "new"], capture_output=True, text=True, env=env)
    assert (quiet.returncode, quiet.stdout) == (1, "")
    assert quiet.stderr.startswith("error: internal: FileExistsError: ")
    assert str(home) in quiet.stderr
    assert quiet.stderr.endswith(f"{HINT}\n") and quiet.stderr.count("\n") == 1
    loud = subprocess.run(
        [str(panda), "--debug", "key", "new"], capture_output=True, text=True, env=env
    )
    assert loud.returncode == 1
    assert loud.stderr.startswith("Traceback (most recent call last):")
    assert loud.stderr.splitlines()[-1].startswith("error: internal: FileExistsError: ")


def test_an_internal_message_is_one_line_without_stack_frames() -> None:
    java = RuntimeError(
        "materializing x failed:\n"
        "  org.postgresql.util.PSQLException: refused\n"
        "\tat org.postgresql.Driver.connect(Driver.java:1)\n"
        "\t... 12 more\n"
    )
    assert (
        internal_message(java)
        == "materializing x failed: org.postgresql.util.PSQLException: refused"
    )
    assert internal_message(ValueError()) == "ValueError"
    long = internal_message(OSError("x" * 1000))
    assert len(long) == MAX_INTERNAL_MESSAGE and long.endswith("…") and "\n" not in long


# --- what libraries print ----------------------------------------------------------


def noisy_create_key(*args: object, **kwargs: object) -> None:
    """What Spark, Dagster and py4j do during a command, from outside the product."""
    warnings.warn("a library warning", UserWarning, stacklevel=1)
    logging.getLogger("py4j.clientserver").error("py4j noise")
    logging.getLogger("dagster").warning("dagster noise")
    print("a library's print", file=sys.stderr)
    os.write(2, b"descriptor noise\n")
    subprocess.run(["sh", "-c", "echo child noise >&2"], check=True)
    raise P2pandaError(Reason.BAD_INPUT, "the product's own line")


NOISE = ("a library's print", "descriptor noise", "child noise")


def test_by_default_stderr_has_the_products_lines_only(
    capfd, caplog, recwarn, monkeypatch: pytest.MonkeyPatch, p2panda_home: Path
) -> None:
    monkeypatch.setattr(key_cmd, "create_key", noisy_create_key)
    caplog.set_level(logging.INFO)  # py4j logs each command to a live JVM at DEBUG
    assert main(["key", "new"]) == 1
    out, err = capfd.readouterr()
    assert (out, err) == ("", "error: bad-input: the product's own line\n")
    assert [r.getMessage() for r in caplog.records] == []
    assert [str(w.message) for w in recwarn] == []
    assert sys.stderr is not None and not hasattr(sys.stderr, "target")  # put back


def test_verbose_shows_what_the_libraries_print(
    capfd, caplog, recwarn, monkeypatch: pytest.MonkeyPatch, p2panda_home: Path
) -> None:
    monkeypatch.setattr(key_cmd, "create_key", noisy_create_key)
    caplog.set_level(logging.INFO)  # py4j logs each command to a live JVM at DEBUG
    assert main(["--verbose", "key", "new"]) == 1
    _, err = capfd.readouterr()
    for noise in NOISE:
        assert noise in err
    assert err.endswith("error: bad-input: the product's own line\n")
    assert [r.getMessage() for r in caplog.records] == ["py4j noise", "dagster noise"]
    assert [str(w.message) for w in recwarn] == ["a library warning"]


def test_verbose_asks_spark_for_its_warnings(
    monkeypatch: pytest.MonkeyPatch, p2panda_home: Path
) -> None:
    from p2panda_assets.pipeline.spark.session import spark_config

    seen = []
    monkeypatch.delenv("P2PANDA_SPARK_LOG_LEVEL", raising=False)
    monkeypatch.setattr(
        key_cmd, "create_key", lambda **_: seen.append(os.environ.get("P2PANDA_SPARK_LOG_LEVEL"))
    )
    main(["key", "new"])
    main(["--verbose", "key", "new"])
    assert seen == [None, "warn"]
    assert "P2PANDA_SPARK_LOG_LEVEL" not in os.environ
    options = spark_config("local[1]")["spark.driver.extraJavaOptions"].split()
    assert "-Duser.timezone=UTC" in options
    log4j = next(o for o in options if o.startswith("-Dlog4j2.configurationFile=file://"))
    config = Path(log4j.removeprefix("-Dlog4j2.configurationFile=file://"))
    text = config.read_text()
    assert "rootLogger.level = ${level}" in text
    assert "property.level = ${env:P2PANDA_SPARK_LOG_LEVEL:-error}" in text


# --- the help ------------------------------------------------------------------------


def test_the_help_opens_with_what_the_tool_does(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    first = out.split("\n\n")[1]
    assert first.startswith("panda keeps p2panda data in PostgreSQL:")
    assert "Entry point" not in out
    for flag in ("--verbose", "--debug"):
        assert flag in out
    for command in ("key", "schema", "publish", "ingest", "materialize", "server", "demo"):
        assert f"\n    {command}" in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["ingest"], "panda ingest: the following arguments are required: FILE"),
        (["no-such-command"], "panda: argument COMMAND: invalid choice: 'no-such-command'"),
        (["register", "abc"], "panda register: the following arguments are required: LOG_ID"),
        (["ingest", "a.jsonl", "--no-such-flag"], "panda: unrecognized arguments: --no-such"),
        (["status", "--verbos"], "panda: unrecognized arguments: --verbos"),  # no prefixes
        (["--debu", "status"], "panda: unrecognized arguments: --debu"),
    ],
)
def test_a_command_line_panda_does_not_take_is_one_error_line(
    capsys, argv: list[str], said: str
) -> None:
    """As every other error: `error: bad-usage: ...` on stderr, exit 1 (argparse printed
    its usage and a line of its own, and exited 2)."""
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"error: bad-usage: {said}"), line
    assert line.endswith(" (--help lists the arguments)")


# --- schemas named by name -------------------------------------------------------------


def note_corpus(*seeds: int) -> tuple[list[str], list[str]]:
    """Per seed, an author's schema `note` (log 7, field title) and one instance of it;
    the entry lines, and the schema ids."""
    corpus = CorpusBuilder()
    ids = []
    for seed in seeds:
        schema = corpus.author(seed).schema(7, "note")
        schema.migrate(create_field("title", "text"))
        instances(corpus.author(seed), 8).create(schema.ref(2), title=f"by {seed}")
        ids.append(schema.schema_id)
    return [entry_line(*pair) for pair in corpus.pairs], ids


def test_preview_takes_a_schema_name(capsys, tmp_path: Path) -> None:
    lines, (schema_id,) = note_corpus(1)
    story = tmp_path / "story.jsonl"
    story.write_text("".join(line + "\n" for line in lines))
    by_id = run(capsys, "preview", story, "--schema", schema_id)
    assert by_id[0] == 0 and '"title": "by 1"' in by_id[1]
    assert run(capsys, "preview", story, "--schema", "note") == by_id
    code, out, err = run(capsys, "preview", story, "--schema", "nope")
    assert (code, out) == (1, "")
    assert (
        err == "error: unknown-schema: no schema named 'nope' is in the input; the closest: note\n"
    )
    code, _, err = run(capsys, "preview", story, "--schema", "zzz")
    assert err == "error: unknown-schema: no schema named 'zzz' is in the input\n"


def test_preview_refuses_a_name_two_schemas_share(capsys, tmp_path: Path) -> None:
    lines, ids = note_corpus(1, 2)
    story = tmp_path / "story.jsonl"
    story.write_text("".join(line + "\n" for line in lines))
    code, _, err = run(capsys, "preview", story, "--schema", "note")
    assert code == 1
    assert err == (
        f"error: bad-input: 2 schemas are named 'note' ({', '.join(sorted(ids))}):"
        " name one by its schema id\n"
    )
    assert run(capsys, "preview", story, "--schema", ids[1])[1].count("by 2") == 1


def typed(schema_id: str) -> str:
    """`schema_id` as a person may type it, and `panda register` takes it: upper-case
    hex, the log id with leading zeros."""
    author, log_id = schema_id.rsplit("-", 1)
    return f"{author.upper()}-00{log_id}"


def test_every_command_reads_a_schema_id_as_panda_register_takes_it(capsys, tmp_path: Path) -> None:
    """(`panda materialize`, `check`, `unregister` and `preview` took it for a name, and
    answered that no schema of that name is registered.)"""
    from p2panda_assets.cli.materialize_cmd import resolve_schemas

    lines, (schema_id,) = note_corpus(1)
    assert resolve_schemas([typed(schema_id)]) == [schema_id]
    story = tmp_path / "story.jsonl"
    story.write_text("".join(line + "\n" for line in lines))
    by_id = run(capsys, "preview", story, "--schema", schema_id)
    assert by_id[0] == 0
    assert run(capsys, "preview", story, "--schema", typed(schema_id)) == by_id
    # Zeros before the log id are only zeros; 4,301 digits more are no id (int() refused).
    author, log_id = schema_id.rsplit("-", 1)
    assert resolve_schemas([f"{author}-{'0' * 5_000}{log_id}"]) == [schema_id]
    code, _, err = run(capsys, "preview", story, "--schema", f"{author}-{'9' * 5_000}")
    assert code == 1 and err.startswith("error: unknown-schema: no schema named")


@pytest.mark.postgres
def test_check_reads_a_typed_schema_id(capsys, conn) -> None:
    from p2panda_assets.coordination import check
    from p2panda_assets.store.registry import register

    _, (schema_id,) = note_corpus(1)
    author, log_id = schema_id.rsplit("-", 1)
    register(conn, bytes.fromhex(author), int(log_id), None)
    result = check(conn, typed(schema_id), 2)
    assert result.schema_id == schema_id
    assert result.message == f"{schema_id} is registered, not built"


class Stop(Exception):
    """Raised by a stand-in for the Dagster run: the arguments are all the test needs."""


@pytest.mark.postgres
def test_materialize_takes_schema_names(capsys, conn, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2panda_assets.cli.materialize_cmd import resolve_schemas
    from p2panda_assets.defs import orchestration
    from p2panda_assets.store.registry import register

    _, (mail, profile, first, second) = note_corpus(1, 2, 3, 4)
    for schema_id, name in ((mail, "mail"), (profile, None), (first, "dup"), (second, None)):
        author, log_id = schema_id.rsplit("-", 1)
        register(conn, bytes.fromhex(author), int(log_id), name)
    own = "UPDATE p2panda.schemas SET name = %s WHERE schema_id = %s"  # as a build reads it
    conn.execute(own, ("profile", profile))
    conn.execute(own, ("dup", second))  # met after registration: shared (rule T-NAME-HELD)

    assert resolve_schemas(["mail", profile]) == [mail, profile]
    assert resolve_schemas(["profile"]) == [profile]  # the schema's own name, unregistered
    calls = []

    def record(*args: object) -> None:
        calls.append(args)
        raise Stop("recorded")

    monkeypatch.setattr(orchestration, "materialize", record)
    monkeypatch.setattr(orchestration, "materialize_as_of", record)
    assert (
        run(capsys, "materialize", "mail", "profile")[2]
        == f"error: internal: Stop: recorded{HINT}\n"
    )
    assert run(capsys, "materialize", "--as-of-version", "2", "mail")[0] == 1
    assert calls == [([mail, profile],), (mail, 2)]

    code, _, err = run(capsys, "materialize", "nope")
    assert (code, err) == (1, "error: unknown-schema: no schema named 'nope' is registered\n")
    assert len(calls) == 2  # no run for a name that is unknown
    # A name two schemas are known by is its holder's, as its view is (rule T-VIEW): the
    # registered name before the other's own name met after its registration.
    assert resolve_schemas(["dup"]) == [first]
    assert run(capsys, "materialize", "dup")[0] == 1
    assert calls[-1] == ([first],)
