"""deploy/ as far as it can be checked without Docker or Kubernetes: the YAML parses; the
compose file runs only this repository's image and official PostgreSQL, with every variable
the code reads; the image's commands are ones the installed Dagster accepts; the instance
and workspace the compose services use load the code location (through a real code server
started with the image's CMD); the Helm values use only keys of Dagster's official chart."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import dagster as dg
import pytest
import yaml
from dagster._config import validate_config
from dagster._core.errors import DagsterUserCodeUnreachableError
from dagster._core.instance.config import dagster_instance_config_schema
from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, InProcessCodeLocationOrigin
from dagster._core.workspace.config_schema import process_workspace_config
from dagster._core.workspace.load import (
    location_origins_from_config,
    location_origins_from_yaml_paths,
)

from p2panda_assets.defs.orchestration import JOB

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "docker-compose.yaml"
HELM_VALUES = DEPLOY / "helm" / "values.yaml"
SPARK_MANIFESTS = DEPLOY / "helm" / "spark-standalone.yaml"
BIN = Path(sys.executable).parent
# The code server stops on SIGTERM in ~3 s alone; beside the other test worker it once
# outlived a 30 s wait (tests --durations), and nothing here needs its graceful exit.
STOP_SECONDS = 5
FAMILY = {"raw_entries", "decoded_messages", "migration_plan", "materialized_table"}

# Images the compose file may pull rather than build: official ones only.
OFFICIAL_IMAGES = {"postgres:16"}
# What the code reads from the environment (README, pipeline/spark/session.py).
CODE_VARIABLES = ("P2PANDA_DATABASE_URL", "SPARK_MASTER", "DAGSTER_HOME", "P2PANDA_HOME")
# Where Spark executors reach the driver (pipeline/spark/driver_address.py): set wherever
# runs execute.
DRIVER_HOST = "P2PANDA_SPARK_DRIVER_HOST"

# The Compose Specification's top-level and service keys, from compose-spec.json as vendored
# in check-jsonschema 0.39.0 (the whole compose file was validated against that schema once).
COMPOSE_TOP_LEVEL = {
    "configs", "include", "jobs", "models", "name", "networks", "secrets", "services",
    "version", "volumes",
}  # fmt: skip
COMPOSE_SERVICE_KEYS = {
    "annotations", "attach", "blkio_config", "build", "cap_add", "cap_drop", "cgroup",
    "cgroup_parent", "command", "configs", "container_name", "cpu_count", "cpu_percent",
    "cpu_period", "cpu_quota", "cpu_rt_period", "cpu_rt_runtime", "cpu_shares", "cpus", "cpuset",
    "credential_spec", "depends_on", "deploy", "develop", "device_cgroup_rules", "devices", "dns",
    "dns_opt", "dns_search", "domainname", "entrypoint", "env_file", "environment", "expose",
    "extends", "external_links", "extra_hosts", "gpus", "group_add", "healthcheck", "hostname",
    "image", "init", "ipc", "isolation", "label_file", "labels", "links", "logging",
    "mac_address", "mem_limit", "mem_reservation", "mem_swappiness", "memswap_limit", "models",
    "network_mode", "networks", "oom_kill_disable", "oom_score_adj", "pid", "pids_limit",
    "platform", "ports", "post_start", "pre_start", "pre_stop", "privileged", "profiles",
    "provider", "pull_policy", "pull_refresh_after", "read_only", "restart", "runtime", "scale",
    "secrets", "security_opt", "shm_size", "stdin_open", "stop_grace_period", "stop_signal",
    "storage_opt", "sysctls", "tmpfs", "tty", "ulimits", "umask", "use_api_socket", "user",
    "userns_mode", "uts", "volumes", "volumes_from", "working_dir",
}  # fmt: skip

# Dagster's official chart (helm/dagster in dagster-io/dagster). Top-level keys of its
# values.yaml, read from the copy synced with chart 1.12.x that ethereum-optimism/op-analytics
# vendors (helm/dagster/values.yaml, Jan 2026: the newest full copy the search index holds;
# the chart's own file there is an old version) and checked against the chart's schema
# model `DagsterHelmValues` (helm/dagster/schema/schema/charts/dagster/values.py). The
# nested lists below come from the same file and from the 1.13-era `UserDeployment` model
# (dagster_user_deployments/subschema/user_deployments.py, with `deploymentStrategy`).
CHART_TOP_LEVEL = {
    "global", "nameOverride", "fullnameOverride", "rbacEnabled", "imagePullSecrets",
    "dagsterWebserver", "computeLogManager", "pythonLogs", "dagster-user-deployments",
    "scheduler", "runLauncher", "postgresql", "generatePostgresqlPasswordSecret",
    "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "dagsterDaemon",
    "busybox", "extraManifests", "migrate", "telemetry", "serviceAccount", "retention",
    "additionalInstanceConfig", "pipelineRun",
}  # fmt: skip
CHART_GLOBAL = {
    "postgresqlSecretName",
    "dagsterHome",
    "serviceAccountName",
    "celeryConfigSecretName",
}
CHART_USER_DEPLOYMENTS = {"enabled", "enableSubchart", "imagePullSecrets", "deployments"}
CHART_USER_DEPLOYMENT = {
    "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns",
    "deploymentNamespace", "port", "replicaCount", "env", "envConfigMaps", "envSecrets",
    "annotations", "nodeSelector", "affinity", "tolerations", "podSecurityContext",
    "securityContext", "resources", "livenessProbe", "readinessProbe", "startupProbe", "labels",
    "volumeMounts", "volumes", "schedulerName", "initContainers", "sidecarContainers",
    "deploymentStrategy", "service",
}  # fmt: skip
CHART_K8S_RUN_LAUNCHER = {
    "imagePullPolicy", "image", "jobNamespace", "loadInclusterConfig", "kubeconfigFile",
    "envConfigMaps", "envSecrets", "envVars", "volumes", "volumeMounts", "labels", "resources",
    "schedulerName", "failPodOnRunFailure", "securityContext", "runK8sConfig",
}  # fmt: skip
CHART_POSTGRESQL = {
    "enabled", "image", "postgresqlHost", "postgresqlUsername", "postgresqlPassword",
    "postgresqlDatabase", "postgresqlParams", "postgresqlScheme", "service",
}  # fmt: skip
CHART_DAEMON = {
    "enabled", "image", "heartbeatTolerance", "runCoordinator", "runMonitoring", "runRetries",
    "sensors", "schedules", "env", "envConfigMaps", "envSecrets", "deploymentLabels", "labels",
    "volumes", "volumeMounts", "annotations", "nodeSelector", "affinity", "tolerations",
    "podSecurityContext", "securityContext", "resources", "initContainerResources",
    "checkDbReadyInitContainer", "schedulerName", "livenessProbe", "readinessProbe",
    "startupProbe",
}  # fmt: skip


# --- reading the files ------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def dockerfile_cmd() -> list[str]:
    [cmd] = [json.loads(args) for op, args in dockerfile_instructions() if op == "CMD"]
    return cmd


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for op, args in dockerfile_instructions():
        if op == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    return env


def dockerfile_copies() -> dict[str, str]:
    """Source -> destination path in the image, for every COPY from the build context."""
    copies = {}
    for op, args in dockerfile_instructions():
        if op == "COPY" and not args.startswith("--from"):
            *sources, destination = args.split()
            into_dir = destination.endswith("/") or len(sources) > 1
            for source in sources:
                name = PurePosixPath(destination) / Path(source).name
                copies[source] = str(name) if into_dir else destination
    return copies


def image_path(path: Path) -> PurePosixPath | None:
    """Where a file of the repository lands in the image, if a COPY takes it."""
    relative = path.relative_to(ROOT)
    for source, destination in dockerfile_copies().items():
        if relative == Path(source) or relative.is_relative_to(source):
            return PurePosixPath(destination) / relative.relative_to(source)
    return None


def interpolate(value: str) -> str:
    """Compose's variable substitution with every variable unset: the defaults apply."""
    value = re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)
    return value.replace("$$", "$")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, dict]:
    return compose()["services"]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: interpolate(str(value)) for key, value in env.items()}


def built_here(service: dict) -> bool:
    return "build" in service


def runs_image_cmd(service: dict) -> bool:
    """The code server: this image with its CMD left alone."""
    return built_here(service) and "command" not in service and "entrypoint" not in service


def command_of(service: dict) -> list[str]:
    """What the container runs: its command, else (this image) the Dockerfile's CMD."""
    default = dockerfile_cmd() if built_here(service) else []
    return [str(part) for part in service.get("command") or default]


def the_service(predicate) -> tuple[str, dict]:
    [(name, service)] = [(n, s) for n, s in services().items() if predicate(s)]
    return name, service


def code_server() -> tuple[str, dict]:
    return the_service(runs_image_cmd)


def spark_master() -> tuple[str, dict]:
    return the_service(lambda s: "org.apache.spark.deploy.master.Master" in command_of(s))


def spark_workers() -> list[tuple[str, dict]]:
    workers = [
        (name, service)
        for name, service in services().items()
        if "org.apache.spark.deploy.worker.Worker" in command_of(service)
    ]
    assert workers
    return workers


def mounts(service: dict) -> dict[str, str]:
    """Mount point -> named volume (or host path)."""
    found = {}
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        found[target] = source
    return found


def option(args: list[str], *names: str) -> str:
    for i, arg in enumerate(args):
        if arg in names:
            return args[i + 1]
    raise AssertionError(f"none of {names} in {args}")


def flags(args: list[str]) -> list[str]:
    return [arg for arg in args if arg.startswith("-")]


@functools.cache
def help_flags(*command: str) -> frozenset[str]:
    """The options a CLI documents in its --help."""
    text = subprocess.run(
        [str(BIN / command[0]), *command[1:], "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))


def helm_values() -> dict:
    return yaml.safe_load(HELM_VALUES.read_text())


def user_deployment() -> dict:
    [deployment] = helm_values()["dagster-user-deployments"]["deployments"]
    return deployment


def spark_manifests() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(SPARK_MANIFESTS.read_text()) if doc]


# --- YAML and the compose file ------------------------------------------------------------


@pytest.mark.parametrize(
    "path", sorted(DEPLOY.rglob("*.yaml")), ids=lambda p: str(p.relative_to(DEPLOY))
)
def test_every_yaml_file_parses(path: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    assert documents and all(isinstance(doc, dict) for doc in documents)


def test_compose_uses_only_keys_of_the_compose_specification() -> None:
    config = compose()
    assert {key for key in config if not key.startswith("x-")} <= COMPOSE_TOP_LEVEL
    for name, service in config["services"].items():
        assert set(service) <= COMPOSE_SERVICE_KEYS, name


def test_compose_builds_this_repositorys_dockerfile_or_pulls_official_images() -> None:
    """Images built from deploy/Dockerfile (one tag for all of them), else official ones."""
    tags = set()
    for name, service in services().items():
        if built_here(service):
            context = (DEPLOY / service["build"]["context"]).resolve()
            assert context == ROOT, name
            assert (context / service["build"]["dockerfile"]).resolve() == DOCKERFILE, name
            tags.add(interpolate(service["image"]))
        else:
            assert service["image"] in OFFICIAL_IMAGES, name
    assert DOCKERFILE.is_file()
    assert len(tags) == 1, tags


def test_every_variable_the_code_reads_is_set_in_every_service_of_this_image() -> None:
    for name, service in services().items():
        if built_here(service):
            env = environment(service)
            assert all(env.get(variable) for variable in CODE_VARIABLES), name


def test_the_database_url_names_the_postgres_service_and_its_credentials() -> None:
    [(pg_name, postgres)] = [(n, s) for n, s in services().items() if not built_here(s)]
    pg = environment(postgres)
    for name, service in services().items():
        if built_here(service):
            url = urlsplit(environment(service)["P2PANDA_DATABASE_URL"])
            assert url.scheme == "postgresql"
            assert (url.hostname, url.port or 5432) == (pg_name, 5432), name
            assert (url.username, url.password) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"])
            assert url.path == f"/{pg['POSTGRES_DB']}"
        if command_of(service) and command_of(service)[0].startswith("dagster"):
            # Dagster's processes open the instance at start: the database must be ready.
            assert service["depends_on"][pg_name]["condition"] == "service_healthy", name
    assert "healthcheck" in postgres


def test_spark_master_is_where_spark_master_points() -> None:
    """SPARK_MASTER, the master's own address and the workers' target agree."""
    name, master = spark_master()
    args = command_of(master)
    host = master.get("hostname", name)
    url = f"spark://{host}:{option(args, '--port')}"
    assert host == name and option(args, "--host") == host
    for service_name, service in services().items():
        if built_here(service):
            assert environment(service)["SPARK_MASTER"] == url, service_name
    for _, worker in spark_workers():
        assert url in command_of(worker)


def test_spark_workers_can_be_scaled() -> None:
    """`--scale spark-worker=N` needs no fixed container name and no published port."""
    for name, worker in spark_workers():
        assert "container_name" not in worker and "ports" not in worker, name


def test_the_spark_driver_and_the_workers_share_p2panda_home() -> None:
    """Parquet written by the driver (the code server, which runs the runs) is read by the
    executors by the same path: one named volume mounted at $P2PANDA_HOME in all of them."""
    declared = set(compose().get("volumes") or {})
    sources = set()
    for _, service in [code_server(), *spark_workers()]:
        home = environment(service)["P2PANDA_HOME"]
        assert PurePosixPath(home).is_absolute()
        source = mounts(service).get(home)
        assert source in declared
        sources.add(source)
    assert len(sources) == 1


def test_the_spark_driver_advertises_the_code_servers_service_name() -> None:
    """Runs are the code server's subprocesses, so it is every run's Spark driver: executors
    on the workers must reach it by its service name (Docker's DNS), not at their own
    localhost, which is what the driver advertises when nothing sets its host."""
    name, server = code_server()
    assert environment(server).get(DRIVER_HOST) == name
    sources = list((ROOT / "p2panda_assets").rglob("*.py"))
    assert any(DRIVER_HOST in path.read_text() for path in sources), "the product reads it"


def test_dagster_storage_directories_are_on_a_volume_the_webserver_shares() -> None:
    """Compute logs and asset outputs outlive the code server container, and the webserver
    reads the logs."""
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    directories = [
        instance["local_artifact_storage"]["config"]["base_dir"],
        instance["compute_logs"]["config"]["base_dir"],
    ]
    _, server = code_server()
    [(_, webserver)] = [
        (n, s) for n, s in services().items() if "dagster-webserver" in command_of(s)
    ]
    for service in (server, webserver):
        volumes = mounts(service)
        for directory in directories:
            assert any(PurePosixPath(directory).is_relative_to(target) for target in volumes), (
                directory
            )


# --- the image --------------------------------------------------------------------------


def test_the_image_cmd_starts_the_code_server_on_the_definitions_module() -> None:
    cmd = dockerfile_cmd()
    assert cmd[:3] == ["dagster", "code-server", "start"]
    assert importlib.util.find_spec(option(cmd, "-m", "--module-name")) is not None
    accepted = help_flags("dagster", "code-server", "start")
    assert set(flags(cmd[3:])) <= accepted


def test_the_webserver_and_daemon_commands_are_accepted_by_the_installed_dagster() -> None:
    seen = set()
    for name, service in services().items():
        command = command_of(service)
        if command[:1] == ["dagster-webserver"]:
            assert set(flags(command[1:])) <= help_flags("dagster-webserver"), name
        elif command[:2] == ["dagster-daemon", "run"]:
            assert set(flags(command[2:])) <= help_flags("dagster-daemon", "run"), name
        else:
            continue
        seen.add(command[0])
    assert seen == {"dagster-webserver", "dagster-daemon"}


def test_healthchecks_run_commands_the_image_has() -> None:
    """The code server's probe is `dagster api grpc-health-check` on the CMD's port."""
    _, server = code_server()
    test = server["healthcheck"]["test"]
    assert test[1:4] == ["dagster", "api", "grpc-health-check"]
    assert option(test, "-p") == option(dockerfile_cmd(), "-p")
    assert set(flags(test[4:])) <= help_flags("dagster", "api", "grpc-health-check")


def test_the_image_holds_the_instance_and_workspace_where_the_services_look() -> None:
    copies = dockerfile_copies()
    env = dockerfile_env()
    home = PurePosixPath(copies["deploy/dagster.yaml"]).parent
    assert str(home) == env["DAGSTER_HOME"]
    workspace = copies["deploy/workspace.yaml"]
    for name, service in services().items():
        if not built_here(service):
            continue
        assert environment(service)["DAGSTER_HOME"] == str(home), name
        command = command_of(service)
        if command[0] in ("dagster-webserver", "dagster-daemon"):
            assert option(command, "-w", "--workspace") == workspace, name
    assert env["P2PANDA_HOME"] == environment(code_server()[1])["P2PANDA_HOME"]


def test_the_build_context_sends_what_the_dockerfile_copies() -> None:
    """Dockerfile.dockerignore (BuildKit's per-Dockerfile ignore file) excludes everything but
    the COPY sources; each of them exists and is let through."""
    patterns = [
        line
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    allowed = {pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")}
    for source in dockerfile_copies():
        assert (ROOT / source).exists(), source
        assert source.rstrip("/") in allowed, source


def test_the_classic_builder_ignores_what_buildkit_ignores() -> None:
    """The classic builder (Docker without buildx) reads only `.dockerignore` at the root of
    the build context, never Dockerfile.dockerignore: the same patterns there keep a real
    checkout's .venv, .p2panda and .git out of the context it sends."""

    def patterns(path: Path) -> list[str]:
        lines = (line.strip() for line in path.read_text().splitlines())
        return [line for line in lines if line and not line.startswith("#")]

    for name, service in services().items():
        if built_here(service):
            context = (DEPLOY / service["build"]["context"]).resolve()
            assert patterns(context / ".dockerignore") == patterns(
                DEPLOY / "Dockerfile.dockerignore"
            ), name


def test_no_file_copied_into_the_image_is_a_symlink() -> None:
    """A symlink's target may not be in the build context or the package, and `pip
    install` would silently leave it out: everything the image copies is a real file."""
    links = [
        path
        for source in dockerfile_copies()
        for path in [ROOT / source, *(ROOT / source).rglob("*")]
        if path.is_symlink()
    ]
    assert links == []


def test_the_image_installs_the_run_launcher_the_helm_values_choose() -> None:
    """Kubernetes run pods run this image and load the chart's instance (K8sRunLauncher)."""
    assert helm_values()["runLauncher"]["type"] == "K8sRunLauncher"
    installs = " ".join(args for op, args in dockerfile_instructions() if op == "RUN")
    assert "dagster-k8s" in installs


# --- Dagster's instance and workspace -------------------------------------------------------


def test_the_workspace_is_valid_and_points_at_the_code_server() -> None:
    config = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    result = process_workspace_config(config)
    assert result.success, result.errors
    [origin] = location_origins_from_yaml_paths([str(DEPLOY / "workspace.yaml")])
    assert isinstance(origin, GrpcServerCodeLocationOrigin)
    name, _ = code_server()
    assert (origin.host, origin.port) == (name, int(option(dockerfile_cmd(), "-p")))
    assert origin.location_name == "p2panda_assets"


def test_the_module_the_code_server_serves_loads_in_process() -> None:
    """The same location as a python_module entry: the definitions load and have the family."""
    [origin] = location_origins_from_yaml_paths([str(DEPLOY / "workspace.yaml")])
    workspace = {
        "load_from": [
            {
                "python_module": {
                    "module_name": option(dockerfile_cmd(), "-m"),
                    "location_name": origin.location_name,
                }
            }
        ]
    }
    assert process_workspace_config(workspace).success
    [module_origin] = location_origins_from_config(
        workspace, str(DEPLOY / "workspace.yaml")
    ).values()
    in_process = InProcessCodeLocationOrigin(
        module_origin.loadable_target_origin, module_origin.location_name
    )
    with dg.DagsterInstance.ephemeral() as instance:
        location = in_process.create_location(instance)
        [repository] = location.get_repositories().values()
        assert repository.has_job(JOB)
        assert {node.asset_key.to_user_string() for node in repository.get_asset_node_snaps()} == (
            FAMILY
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def container_like_home(tmp_path: Path, session_database: str) -> Iterator[dict[str, str]]:
    """The environment the compose file gives the code server, on this machine: the
    image's dagster.yaml in DAGSTER_HOME and a real PostgreSQL behind P2PANDA_DATABASE_URL."""
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(DEPLOY / "dagster.yaml", dagster_home / "dagster.yaml")
    env = dict(os.environ)
    env |= {
        "DAGSTER_HOME": str(dagster_home),
        "P2PANDA_DATABASE_URL": session_database,
        "P2PANDA_HOME": str(tmp_path / "p2panda"),
        "SPARK_MASTER": "spark://127.0.0.1:7077",
    }
    yield env


@pytest.fixture
def code_server_process(
    tmp_path: Path, container_like_home: dict[str, str]
) -> Iterator[tuple[int, subprocess.Popen]]:
    """The image's CMD, bound to loopback on a free port instead of 0.0.0.0:4000."""
    port = free_port()
    cmd = dockerfile_cmd()
    cmd[cmd.index("-h") + 1] = "127.0.0.1"
    cmd[cmd.index("-p") + 1] = str(port)
    process = subprocess.Popen(
        [str(BIN / cmd[0]), *cmd[1:]],
        cwd=tmp_path,
        env=container_like_home,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the server and its child stop together
    )
    try:
        yield port, process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.postgres
def test_the_compose_instance_and_workspace_load_the_location_from_the_image_cmd(
    tmp_path: Path,
    container_like_home: dict[str, str],
    code_server_process: tuple[int, subprocess.Popen],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the webserver and the daemon do at start: load deploy/dagster.yaml on the real
    database, then the location deploy/workspace.yaml names, from a code server started
    with the image's CMD (only the host name differs: 127.0.0.1, not the service name)."""
    for key in ("DAGSTER_HOME", "P2PANDA_DATABASE_URL"):
        monkeypatch.setenv(key, container_like_home[key])
    port, process = code_server_process
    config = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    config["load_from"][0]["grpc_server"] |= {"host": "127.0.0.1", "port": port}
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(yaml.safe_dump(config))
    [origin] = location_origins_from_yaml_paths([str(workspace)])

    with dg.DagsterInstance.from_config(container_like_home["DAGSTER_HOME"]) as instance:
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
        assert type(instance.run_coordinator).__name__ == "LiveRunCoordinator"  # queued
        assert type(instance.run_storage).__module__.startswith("dagster_postgres")
        assert isinstance(instance.get_runs(), list)  # the run storage answers
        location = None
        deadline = time.monotonic() + 120
        while location is None:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            try:
                location = origin.create_location(instance)
            except DagsterUserCodeUnreachableError:  # still starting; a load error fails now
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        with location:
            assert location.name == "p2panda_assets"
            [repository] = location.get_repositories().values()
            assert repository.has_job(JOB)
            assets = {node.asset_key.to_user_string() for node in repository.get_asset_node_snaps()}
            assert assets == FAMILY


# --- Helm ---------------------------------------------------------------------------------


def test_helm_values_use_only_keys_of_the_official_chart() -> None:
    values = helm_values()
    assert set(values) <= CHART_TOP_LEVEL
    assert set(values.get("global", {})) <= CHART_GLOBAL
    assert set(values["dagster-user-deployments"]) <= CHART_USER_DEPLOYMENTS
    assert set(user_deployment()) <= CHART_USER_DEPLOYMENT
    assert set(values["runLauncher"]["config"]["k8sRunLauncher"]) <= CHART_K8S_RUN_LAUNCHER
    assert set(values["postgresql"]) <= CHART_POSTGRESQL
    assert set(values["dagsterDaemon"]) <= CHART_DAEMON


def test_helm_values_choose_k8s_runs_external_postgres_and_the_daemon() -> None:
    values = helm_values()
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is False
    assert values["postgresql"]["postgresqlHost"]
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    assert values["dagsterDaemon"]["enabled"] is True
    assert values["dagster-user-deployments"]["enabled"] is True


def test_the_user_deployment_runs_the_code_server_on_the_definitions_module() -> None:
    """The chart runs `dagster code-server start -h 0.0.0.0 -p PORT` + codeServerArgs."""
    deployment = user_deployment()
    assert "dagsterApiGrpcArgs" not in deployment
    args = ["-h", "0.0.0.0", "-p", str(deployment["port"]), *deployment["codeServerArgs"]]
    assert set(flags(args)) <= help_flags("dagster", "code-server", "start")
    assert option(args, "-m", "--module-name") == option(dockerfile_cmd(), "-m")


def test_the_database_url_comes_from_a_secret_not_from_the_values() -> None:
    deployment = user_deployment()
    plain = {item["name"] for item in deployment["env"]}
    assert "P2PANDA_DATABASE_URL" not in plain
    assert deployment["envSecrets"]
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True


def test_the_code_server_and_every_run_pod_advertise_their_pod_ip_to_spark() -> None:
    """Each run pod is a Spark driver: executors reach it at its own pod IP (the downward
    API, read in each pod), and the chart passes this env list, valueFrom included, to
    run pods (includeConfigInLaunchedRuns)."""
    deployment = user_deployment()
    [item] = [item for item in deployment["env"] if item["name"] == DRIVER_HOST]
    assert item == {"name": DRIVER_HOST, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True


def test_spark_master_in_the_values_is_the_spark_service_of_the_manifests() -> None:
    env = {item["name"]: item.get("value") for item in user_deployment()["env"]}
    url = urlsplit(env["SPARK_MASTER"])
    [service] = [doc for doc in spark_manifests() if doc["kind"] == "Service"]
    rpc = {port["port"] for port in service["spec"]["ports"]}
    assert url.scheme == "spark"
    assert url.hostname == service["metadata"]["name"] and url.port in rpc
    workers = [
        doc
        for doc in spark_manifests()
        if doc["kind"] == "Deployment" and "org.apache.spark.deploy.worker.Worker" in str(doc)
    ]
    for worker in workers:
        [container] = worker["spec"]["template"]["spec"]["containers"]
        assert env["SPARK_MASTER"] in container["args"]


def test_the_spark_pods_run_the_code_location_image_and_share_p2panda_home() -> None:
    deployment = user_deployment()
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    env = {item["name"]: item.get("value") for item in deployment["env"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"]}
    home = {m["mountPath"]: claims[m["name"]] for m in deployment["volumeMounts"]}
    claim = home[env["P2PANDA_HOME"]]
    manifests = spark_manifests()
    assert any(
        doc["kind"] == "PersistentVolumeClaim"
        and doc["metadata"]["name"] == claim
        and "ReadWriteMany" in doc["spec"]["accessModes"]
        for doc in manifests
    )
    for doc in manifests:
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in pod["containers"]:
            assert container["image"] == image
        if "org.apache.spark.deploy.worker.Worker" in str(pod):
            pod_claims = {
                v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
            }
            [container] = pod["containers"]
            mounted = {m["mountPath"]: pod_claims[m["name"]] for m in container["volumeMounts"]}
            assert mounted.get(env["P2PANDA_HOME"]) == claim


def test_additional_instance_config_is_valid_dagster_instance_config() -> None:
    """The chart appends it to the instance it renders: Dagster's own schema must accept it."""
    extra = helm_values()["additionalInstanceConfig"]
    result = validate_config(dagster_instance_config_schema(), extra)
    assert result.success, result.errors
