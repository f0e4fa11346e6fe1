#!/usr/bin/env bash
# The smoke test an operator runs after an upgrade (deploy/README.md, "Smoke test"): builds
# the image and brings up the whole compose stack as a separate, throwaway project, waits for
# every service, writes the seeds' slothmail story with the image's own `panda` (profile,
# attachment and slothmail schemas, a mail, three migrations, a revert), ingests it, registers
# its three schemas, materializes them on the Spark cluster, checks the tables against
# `panda preview` (the pure engine) and `panda check`, checks that the Spark master lists the
# run as a completed application, then lets the sensors alone bring one more mail to its row.
# It always tears the stack down (`down -v`: its own volumes only) and ends with one line,
# `smoke: PASS` (exit 0) or `smoke: FAIL: <step>: <reason>` (exit 1).
#
#   bash deploy/smoke.sh                 # from anywhere; needs Docker and compose v2 or later
#   SMOKE_KEEP=1 bash deploy/smoke.sh    # leave the stack up to look at it (then `down -v` it)
#
# It never touches the production stack: its own compose project (SMOKE_PROJECT, default
# p2panda-smoke) has its own containers and volumes, and publishes the UIs on other ports
# (SMOKE_WEBSERVER_PORT, default 13000; SMOKE_SPARK_UI_PORT, default 18080). It does build
# the image tag the stack runs (p2panda-assets:${P2PANDA_IMAGE_TAG:-local}), as `up --build`
# does. Every wait is bounded (seconds, each overridable): SMOKE_UP_TIMEOUT (build and start,
# 2400), SMOKE_HEALTH_TIMEOUT (300), SMOKE_STEP_TIMEOUT (one `panda` command, 180),
# SMOKE_MATERIALIZE_TIMEOUT (900), SMOKE_SENSOR_TIMEOUT (600; SMOKE_SENSORS=0 skips that
# step), SMOKE_DOWN_TIMEOUT (300). Logs of every step go to a directory it names.
# SMOKE_COMPOSE_FILES: more compose files (colon-separated), layered on
# deploy/docker-compose.yaml as `-f` options, e.g. the override files the deployment uses.
set -Eeuo pipefail

caller="$PWD"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

project="${SMOKE_PROJECT:-p2panda-smoke}"
export DAGSTER_WEBSERVER_PORT="${SMOKE_WEBSERVER_PORT:-13000}"
export SPARK_MASTER_UI_PORT="${SMOKE_SPARK_UI_PORT:-18080}"
up_timeout="${SMOKE_UP_TIMEOUT:-2400}"
health_timeout="${SMOKE_HEALTH_TIMEOUT:-300}"
step_timeout="${SMOKE_STEP_TIMEOUT:-180}"
materialize_timeout="${SMOKE_MATERIALIZE_TIMEOUT:-900}"
sensor_timeout="${SMOKE_SENSOR_TIMEOUT:-600}"
down_timeout="${SMOKE_DOWN_TIMEOUT:-300}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/p2panda-smoke.XXXXXX")"

# The compose command of the smoke's project: deploy/docker-compose.yaml, then any files of
# SMOKE_COMPOSE_FILES (colon-separated, e.g. the override files the deployment uses).
compose=(docker compose -p "$project" -f deploy/docker-compose.yaml)
IFS=: read -r -a overrides <<< "${SMOKE_COMPOSE_FILES:-}"
for file in "${overrides[@]}"; do
  [ -z "$file" ] && continue
  [[ "$file" = /* ]] || file="$caller/$file"   # relative to where the smoke was started
  compose+=(-f "$file")
done
dc() { timeout 60 "${compose[@]}" "$@"; }  # quick queries (ps)

started=$SECONDS
owned=0
phase_start=$SECONDS
step="preflight"
timings=()

say() { echo "smoke: $*"; }
fail() {
  if [ -s "$logs/panda.err" ]; then
    say "last lines panda wrote to stderr ($logs/panda.err):" >&2
    tail -n 8 "$logs/panda.err" | sed 's/^/  /' >&2
  fi
  say "FAIL: $step: $*" >&2
  exit 1
}
done_phase() {  # record how long the step took
  timings+=("$(printf '%-40s %5d s' "$step" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}
begin() { step="$1"; phase_start=$SECONDS; say "$step ..."; }

# Runs `panda ARGS` in the code server's container within the step timeout; stdout to the
# caller, stderr (its progress and notes) to panda.err in the logs, shown on failure.
panda() {
  if [ "${show_stderr:-0}" = 1 ]; then  # a long wait: show what it says it waits for
    timeout --kill-after=10 "$step_timeout" "${compose[@]}" exec -T code-server \
      panda "$@" < /dev/null 2> >(tee -a "$logs/panda.err" | sed 's/^/  /' >&2)
  else
    timeout --kill-after=10 "$step_timeout" "${compose[@]}" exec -T code-server \
      panda "$@" < /dev/null 2>> "$logs/panda.err"
  fi
}
# Authoring commands: a key and state of their own, in the container, not the server's home.
author() {
  timeout --kill-after=10 "$step_timeout" \
    "${compose[@]}" exec -T \
      -e P2PANDA_HOME=/tmp/smoke-author -w /tmp/smoke-author code-server panda "$@" \
      < /dev/null 2>> "$logs/panda.err"
}
# SQL in the postgres container, as the user and database it was started with.
sql() {
  # shellcheck disable=SC2016  # $POSTGRES_*, $1: expanded by the container's shell
  timeout --kill-after=10 "$step_timeout" \
    "${compose[@]}" exec -T postgres \
      sh -c 'psql -v ON_ERROR_STOP=1 -X -At -F "|" -U "$POSTGRES_USER" -d "$POSTGRES_DB" -c "$1"' \
      sql "$1" < /dev/null
}
# The Spark master's /json/ (its web UI's state), summarised by a Python one-off in the image.
spark_state() {
  timeout --kill-after=10 60 "${compose[@]}" \
    exec -T spark-master python -c '
import json, sys, urllib.request
state = json.load(urllib.request.urlopen("http://spark-master:8080/json/", timeout=10))
done = [a for a in state.get("completedapps", []) if a.get("state") == "FINISHED"]
print(state.get("aliveworkers", 0), len(state.get("activeapps", [])), len(done))
for app in done:
    print("  completed:", app["id"], app.get("name"), app.get("state"),
          "%.1f s" % (app.get("duration", 0) / 1000), "cores", app.get("cores"),
          file=sys.stderr)
' < /dev/null
}

cleanup() {
  local status=$?
  trap - EXIT
  set +e
  if [ "$owned" -eq 0 ]; then   # failed before `up`: nothing of ours to look at or remove
    say "FAIL (exit $status)"
    exit "$status"
  fi
  timeout 60 "${compose[@]}" ps -a > "$logs/ps.txt" 2>&1
  timeout 120 "${compose[@]}" logs --no-color --timestamps > "$logs/compose.log" 2>&1  # kept
  if [ "$status" -ne 0 ] && dc ps -q 2>/dev/null | grep -q .; then
    say "the services' logs: $logs/compose.log (last lines of code-server, daemon, spark-worker:)" >&2
    timeout 60 "${compose[@]}" logs --no-color --tail 15 code-server daemon spark-worker 2>&1 \
      | sed 's/^/  /' >&2
  fi
  if [ "${SMOKE_KEEP:-0}" = "1" ]; then
    say "SMOKE_KEEP=1: the stack stays up; remove it with" \
        "${compose[*]} down -v"
  else
    local down_start=$SECONDS
    if timeout --kill-after=10 "$down_timeout" \
         "${compose[@]}" down -v --remove-orphans \
         > "$logs/down.log" 2>&1; then
      timings+=("$(printf '%-40s %5d s' "down -v" $((SECONDS - down_start)))")
    else
      say "down -v failed or timed out ($logs/down.log); the stack may still run" >&2
      [ "$status" -eq 0 ] && status=1
    fi
  fi
  say "timings:"
  printf '  %s\n' "${timings[@]}"
  say "logs: $logs"
  if [ "$status" -eq 0 ]; then
    say "PASS ($((SECONDS - started)) s)"
  else
    say "FAIL (exit $status, $((SECONDS - started)) s; the line 'smoke: FAIL: ...' above says where)"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM
trap 'say "FAIL: $step: line $LINENO: $BASH_COMMAND (exit $?)" >&2' ERR

# --- preflight -----------------------------------------------------------------------------
command -v docker >/dev/null || fail "no docker command"
docker info >/dev/null 2>&1 || fail "the Docker daemon does not answer (docker info)"
version="$(docker compose version --short 2>/dev/null)" \
  || fail "no compose v2: 'docker compose version' fails (install the compose plugin;" \
          "docker-compose v1 cannot read this compose file)"
version="${version#v}"
[ "${version%%.*}" -ge 2 ] 2>/dev/null || fail "compose $version: v2 or later needed"
say "compose $version, project $project, logs in $logs"
[ "$project" != "p2panda-assets" ] \
  || fail "SMOKE_PROJECT=p2panda-assets is the deployment's own project: the smoke removes its volumes"
if dc ps -q 2>/dev/null | grep -q .; then
  fail "project $project is already running: '${compose[*]} down -v' first," \
       "or set SMOKE_PROJECT"
fi
done_phase

# --- up ------------------------------------------------------------------------------------
begin "up -d --build"
owned=1   # from here on, the project is ours to tear down
timeout --kill-after=30 "$up_timeout" \
  "${compose[@]}" up -d --build \
  > "$logs/up.log" 2>&1 \
  || { tail -30 "$logs/up.log" >&2; fail "docker compose up did not succeed ($logs/up.log)"; }
done_phase

begin "services healthy"
# Every service with a healthcheck healthy, the others running, a worker registered.
deadline=$((SECONDS + health_timeout))
while :; do
  waiting=()
  for service in postgres spark-master code-server webserver daemon spark-worker; do
    ids="$(dc ps -q "$service" 2>/dev/null)" || ids=""
    [ -n "$ids" ] || { waiting+=("$service:absent"); continue; }
    for id in $ids; do
      state="$(docker inspect -f \
        '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' \
        "$id" 2>/dev/null)" || state="gone/none"
      case "$state" in
        running/healthy | running/none) ;;
        running/unhealthy | exited/* | dead/*) fail "$service is $state" ;;
        *) waiting+=("$service:$state") ;;
      esac
    done
  done
  if [ ${#waiting[@]} -eq 0 ]; then
    read -r workers _ _ < <(spark_state 2>/dev/null || true) || workers=0
    [ "${workers:-0}" -ge 1 ] && break
    waiting+=("spark-worker:not-registered")
  fi
  [ $SECONDS -lt $deadline ] || fail "after ${health_timeout} s still waiting for ${waiting[*]}"
  sleep 3
done
done_phase

# --- the story -----------------------------------------------------------------------------
begin "write the story"
timeout 60 "${compose[@]}" exec -T code-server \
  mkdir -p /tmp/smoke-author < /dev/null || fail "cannot create /tmp/smoke-author in code-server"
timeout 60 "${compose[@]}" \
  cp resources/. code-server:/tmp/smoke-author/ > "$logs/cp.log" 2>&1 \
  || fail "docker compose cp of resources/ into code-server"
author_hex="$(author key new | head -n 1)" || fail "panda key new"
[[ "$author_hex" =~ ^[0-9a-f]{64}$ ]] || fail "panda key new printed '$author_hex'"
story() { author "$@" --out story.jsonl >> "$logs/story.out" || fail "panda $*"; }
story schema profile init --file profile-001.yaml                               # log 1
story schema attachment init --file attachment-001.yaml                         # log 2
story schema slothmail init --description "Send slothmail to your friends!"     # log 3
story schema slothmail migrate slothmail-001.yaml                               # version 2
story publish create --schema profile --field "name=Sloth"
story publish create --schema slothmail --field "subject=#1 Hi"
story schema slothmail migrate slothmail-002.yaml                               # 3: attachments
story schema slothmail migrate slothmail-003.yaml                               # 4: subjects
story schema slothmail revert --target 3 --yes                                  # 5: as 3
author preview story.jsonl --schema slothmail > "$logs/preview-slothmail.jsonl" \
  || fail "panda preview"
author preview story.jsonl --schema profile > "$logs/preview-profile.jsonl" \
  || fail "panda preview"
# id|subject of each previewed row, sorted: what the table must hold (parsed by the
# image's Python: the host needs none).
expected="$(timeout 60 "${compose[@]}" \
  exec -T code-server python -c '
import json, sys
for row in (json.loads(line) for line in sys.stdin if line.strip()):
    print(row["_instance_id"], "" if row["subject"] is None else row["subject"], sep="|")
' < "$logs/preview-slothmail.jsonl" | LC_ALL=C sort)" || fail "cannot read panda preview's rows"
[ -n "$expected" ] || fail "panda preview gave no slothmail row ($logs/preview-slothmail.jsonl)"
profiles_expected="$(grep -c . "$logs/preview-profile.jsonl" || true)"
entries="$(timeout 60 "${compose[@]}" \
  exec -T code-server wc -l /tmp/smoke-author/story.jsonl < /dev/null | cut -d' ' -f1)" \
  || entries="?"
say "  author $author_hex, $entries entries; preview: $expected"
done_phase

begin "ingest and register"
panda ingest /tmp/smoke-author/story.jsonl > "$logs/ingest.out" || fail "panda ingest"
# Upstream first: slothmail relates to profile and attachment (the logs 1, 2, 3 above).
panda register "$author_hex" 1 --name profile > "$logs/register.out" || fail "register profile"
panda register "$author_hex" 2 --name attachment >> "$logs/register.out" \
  || fail "register attachment"
panda register "$author_hex" 3 --name slothmail >> "$logs/register.out" \
  || fail "register slothmail"
done_phase

# --- materialize on the cluster ------------------------------------------------------------
begin "panda materialize"
# The sensors may have started runs on the registrations already: `panda materialize` then
# waits for the build lock, and finds the tables built or builds what is left.
step_timeout="$materialize_timeout" show_stderr=1 panda materialize > "$logs/materialize.out" \
  || { cat "$logs/materialize.out" >&2
       fail "panda materialize failed or ran over ${materialize_timeout} s" \
            "(a run that hangs: can the workers reach the driver? P2PANDA_SPARK_DRIVER_HOST)"; }
sed 's/^/  /' "$logs/materialize.out"
done_phase

begin "check the tables"
panda check slothmail 5 > "$logs/check.out" \
  || fail "panda check slothmail 5: the database does not hold version 5 ($(cat "$logs/check.out"))"
panda status > "$logs/status.out" || fail "panda status"
sed 's/^/  /' "$logs/status.out"
actual="$(sql 'SELECT _instance_id, subject FROM p2panda_api.slothmail' | LC_ALL=C sort)" \
  || fail "cannot read p2panda_api.slothmail"
[ "$actual" = "$expected" ] \
  || fail "p2panda_api.slothmail holds '$actual', panda preview says '$expected'"
sql 'SELECT attachments FROM p2panda_api.slothmail LIMIT 0' > /dev/null \
  || fail "the reverted-to column 'attachments' is missing from p2panda_api.slothmail"
profiles="$(sql 'SELECT count(*) FROM p2panda_api.profile')" || fail "cannot read profile"
[ "$profiles" = "$profiles_expected" ] \
  || fail "p2panda_api.profile has $profiles rows, panda preview $profiles_expected"
sql 'SELECT count(*) FROM p2panda_api.attachment' > /dev/null || fail "no attachment view"
say "  slothmail rows = preview ($actual); profile rows $profiles; version 5 held"
done_phase

begin "spark master: completed application"
deadline=$((SECONDS + 60))
while :; do
  read -r workers active completed < <(spark_state 2> "$logs/spark-apps.txt" || true) \
    || { workers=0 active=0 completed=0; }
  [ "${completed:-0}" -ge 1 ] && break
  [ $SECONDS -lt $deadline ] \
    || fail "the master lists no FINISHED application (workers ${workers:-?}, active ${active:-?})"
  sleep 3
done
sed 's/^/  /' "$logs/spark-apps.txt"
say "  $workers worker(s), $completed completed application(s), $active active"
done_phase

# --- the sensors alone ---------------------------------------------------------------------
if [ "${SMOKE_SENSORS:-1}" != "0" ]; then
  begin "sensors: a new mail, no materialize"
  author publish create --schema slothmail --field "subject=#2 by the sensors" \
    --out sensors.jsonl > "$logs/sensors.out" || fail "panda publish create"
  panda ingest /tmp/smoke-author/sensors.jsonl >> "$logs/sensors.out" || fail "panda ingest"
  deadline=$((SECONDS + sensor_timeout))
  until [ "$(sql "SELECT count(*) FROM p2panda_api.slothmail
                 WHERE subject = '#2 by the sensors'" 2>/dev/null)" = "1" ]; do
    [ $SECONDS -lt $deadline ] \
      || fail "the new mail did not reach its row within ${sensor_timeout} s (is the daemon up?)"
    sleep 3
  done
  say "  the row appeared $((SECONDS - phase_start)) s after the mail was published"
  done_phase
fi
step="done"
