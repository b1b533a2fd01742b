#!/usr/bin/env bash
# PgBouncer in transaction-pooling mode on 127.0.0.1:6432 in front of the PostgreSQL on 127.0.0.1:5432,
# for running the test suites through it (issue 8). Debian's package: apt-get install -y pgbouncer.
#
#   .ci/pgbouncer.sh start    # writes the config under $PGBOUNCER_DIR, starts the daemon, waits until it answers
#   .ci/pgbouncer.sh stop     # stops the daemon started by `start` (by the pid in its pidfile)
#   .ci/pgbouncer.sh status
#
# Then: PGAGENTSTATE_TEST_DSN=postgresql://postgres@127.0.0.1:6432/test PGAGENTSTATE_PGBOUNCER=1 pytest ...
#
# Auth: the server behind trusts loopback, so PgBouncer trusts too (auth_type=trust); it still only admits the
# user names listed in its auth_file: the superuser the tests use, the restricted role of the RLS tests and
# the application role of docs/security.md.
set -euo pipefail

PGBOUNCER_DIR="${PGBOUNCER_DIR:-/tmp/pgagentstate-pgbouncer}"
PGBOUNCER_PORT="${PGBOUNCER_PORT:-6432}"
PG_HOST="${PG_HOST:-127.0.0.1}"
PG_PORT="${PG_PORT:-5432}"
PGBOUNCER_POOL_SIZE="${PGBOUNCER_POOL_SIZE:-20}"
PGBOUNCER_USERS="${PGBOUNCER_USERS:-postgres pgagentstate_test_app pgagentstate_app}"
PIDFILE="$PGBOUNCER_DIR/pgbouncer.pid"

# PgBouncer refuses to run as root: run it as the postgres OS user when we are root.
as_daemon_user() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

write_config() {
  mkdir -p "$PGBOUNCER_DIR"
  : > "$PGBOUNCER_DIR/userlist.txt"
  for u in $PGBOUNCER_USERS; do printf '"%s" ""\n' "$u" >> "$PGBOUNCER_DIR/userlist.txt"; done
  cat > "$PGBOUNCER_DIR/pgbouncer.ini" <<INI
[databases]
* = host=$PG_HOST port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGBOUNCER_DIR/userlist.txt
pool_mode = transaction
default_pool_size = $PGBOUNCER_POOL_SIZE
max_client_conn = 2000
max_db_connections = $PGBOUNCER_POOL_SIZE
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = $PGBOUNCER_DIR/pgbouncer.log
pidfile = $PIDFILE
admin_users = postgres
INI
  if [ "$(id -u)" -eq 0 ]; then chown -R postgres: "$PGBOUNCER_DIR"; fi
}

is_running() {
  [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

case "${1:-start}" in
  start)
    command -v pgbouncer >/dev/null || { echo "pgbouncer not installed: apt-get install -y pgbouncer" >&2; exit 1; }
    if is_running; then echo "pgbouncer already running (pid $(cat "$PIDFILE"))"; exit 0; fi
    write_config
    as_daemon_user pgbouncer -d "$PGBOUNCER_DIR/pgbouncer.ini"
    for _ in $(seq 1 50); do
      if pg_isready -q -h 127.0.0.1 -p "$PGBOUNCER_PORT" 2>/dev/null; then
        echo "pgbouncer listening on 127.0.0.1:$PGBOUNCER_PORT (transaction pooling -> $PG_HOST:$PG_PORT)"
        exit 0
      fi
      sleep 0.1
    done
    echo "pgbouncer did not start; log:" >&2
    tail -20 "$PGBOUNCER_DIR/pgbouncer.log" >&2 || true
    exit 1
    ;;
  stop)
    if is_running; then
      pid="$(cat "$PIDFILE")"
      kill -INT "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    echo "pgbouncer stopped"
    ;;
  status)
    if is_running; then echo "running (pid $(cat "$PIDFILE"))"; else echo "not running"; exit 1; fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2; exit 2
    ;;
esac
