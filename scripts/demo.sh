#!/usr/bin/env bash
# The five-minute demo: a Consul dev agent, nginx (three backends and a load
# balancer) and ctsync, all on loopback. ctsync keeps nginx's upstream in
# sync with the healthy instances of service "web" in Consul. After the
# scripted changes it keeps running, with the dashboard's URL printed, until
# Ctrl-C (CTSYNC_DEMO_EXIT=1: it stops at once, for scripted runs).
# Everything it starts is stopped, and its temp folder removed, on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CTSYNC="${CTSYNC_BIN:-$ROOT/bin/ctsync}" # make demo builds bin/ctsync; the e2e test gives its own
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
DEMO=$(mktemp -d /tmp/ctsync-demo.XXXXXX)
PIDS=()

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

# cleanup stops what the demo started and removes its folder. It runs to
# the end even when standard output is gone (`make demo | tee demo.log`:
# Ctrl-C stops tee too, and a write to the pipe would kill the shell), and
# a second Ctrl-C does not stop it; it reports on standard error.
cleanup() {
  set +e
  trap '' INT TERM PIPE
  printf '\n\033[1m==> %s\033[0m\n' "Cleaning up" >&2
  local master
  master=$(cat "$DEMO/nginx/nginx.pid" 2>/dev/null)
  if [ -n "$master" ]; then
    # nginx runs as a daemon, outside the demo's process group: stopped
    # here, and waited for.
    "$NGINX" -p "$DEMO/nginx" -c "$DEMO/nginx/nginx.conf" -s stop >/dev/null 2>&1 || kill "$master" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$master" 2>/dev/null
  fi
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$DEMO"
  echo "stopped consul, ctsync and nginx; removed $DEMO" >&2
}
trap cleanup EXIT
# Ctrl-C (or a TERM) at any point ends the demo through the clean-up. The
# trap is set here, not only where the demo waits at the end: a Ctrl-C that
# came while the shell waited for a command that then exited normally (the
# closing words' cat) would otherwise be dropped by bash, and the demo
# would wait on for ever.
trap 'exit 0' INT TERM

# free_port VAR sets VAR to a loopback TCP port nobody listens on, never
# one it gave before (they are all bound later). The ports are taken below
# the kernel's ephemeral range (ip_local_port_range, 32768 and up by
# default): a port in it may be the local end of someone's outgoing
# connection by the time it is bound, and nginx's bind then fails.
TAKEN=" "
PORT_LOW=20000
PORT_HIGH=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$PORT_HIGH" -gt $((PORT_LOW + 1000)) ] 2>/dev/null || PORT_HIGH=40000
free_port() {
  local p
  while :; do
    p=$((PORT_LOW + RANDOM % (PORT_HIGH - PORT_LOW)))
    case "$TAKEN" in *" $p "*) continue ;; esac
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    TAKEN="$TAKEN$p "
    printf -v "$1" '%s' "$p"
    return
  done
}

# wait_for DESCRIPTION COMMAND...: retries COMMAND every 0.2s for up to 60s.
wait_for() {
  local what=$1; shift
  for _ in $(seq 1 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "timed out waiting for $what" >&2
  echo "--- ctsync log ---" >&2; tail -n 40 "$DEMO/ctsync.log" >&2 || true
  exit 1
}

free_port CONSUL_PORT; free_port LB_PORT; free_port B1; free_port B2; free_port B3
free_port SERVER_PORT; free_port SERF_LAN_PORT; free_port SERF_WAN_PORT; free_port API_PORT
CONSUL="http://127.0.0.1:$CONSUL_PORT"

# Consul and ctsync run in sessions of their own (setsid), so that Ctrl-C
# reaches this script alone and its clean-up stops them: in the terminal's
# process group they could exit on the signal before the script's trap
# ran, and the script would take that for a process stopping on its own.
say "Starting a Consul dev agent on 127.0.0.1:$CONSUL_PORT"
setsid consul agent -dev -client 127.0.0.1 -bind 127.0.0.1 -http-port "$CONSUL_PORT" \
  -grpc-port=-1 -grpc-tls-port=-1 -dns-port=-1 -server-port "$SERVER_PORT" \
  -serf-lan-port "$SERF_LAN_PORT" -serf-wan-port "$SERF_WAN_PORT" -log-level error \
  >"$DEMO/consul.log" 2>&1 &
PIDS+=($!)
wait_for "consul" bash -c "curl -sf $CONSUL/v1/status/leader | grep -q :"

say "Starting nginx: backends on :$B1 :$B2 :$B3, load balancer on :$LB_PORT"
mkdir -p "$DEMO/nginx/logs"
cat >"$DEMO/nginx/upstream.conf" <<EOF
upstream backend { server 127.0.0.1:9 down; }
EOF
cat >"$DEMO/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $DEMO/nginx/nginx.pid;
error_log $DEMO/nginx/logs/error.log;
events {}
http {
  access_log off;
  client_body_temp_path $DEMO/nginx/tmp;
  proxy_temp_path $DEMO/nginx/tmp;
  fastcgi_temp_path $DEMO/nginx/tmp;
  uwsgi_temp_path $DEMO/nginx/tmp;
  scgi_temp_path $DEMO/nginx/tmp;
  server { listen 127.0.0.1:$B1; location / { return 200 "hello from web-1\n"; } }
  server { listen 127.0.0.1:$B2; location / { return 200 "hello from web-2\n"; } }
  server { listen 127.0.0.1:$B3; location / { return 200 "hello from web-3\n"; } }
  include $DEMO/nginx/upstream.conf;
  server { listen 127.0.0.1:$LB_PORT; location / { proxy_pass http://backend; } }
}
EOF
mkdir -p "$DEMO/nginx/tmp"
"$NGINX" -p "$DEMO/nginx" -c "$DEMO/nginx/nginx.conf" -e "$DEMO/nginx/logs/error.log"

# nginx_workers prints the PIDs of the nginx master's children: its worker,
# and during a reload the old workers, which still answer with the previous
# upstream (a 502 while it was "server 127.0.0.1:9 down") until they exit.
nginx_workers() {
  local master pid ppid f
  master=$(cat "$DEMO/nginx/nginx.pid" 2>/dev/null) || return 0
  for f in /proc/[0-9]*/stat; do
    read -r pid _ _ ppid _ 2>/dev/null <"$f" || continue # a process may be gone: no message
    if [ "$ppid" = "$master" ]; then printf '%s ' "$pid"; fi
  done
}
# reloaded OLD: nginx's reload has finished: one worker (worker_processes
# 1), none of the workers OLD that ran before the upstream changed (the
# module reloads nginx only when the upstream file changes).
reloaded() {
  # shellcheck disable=SC2046
  set -- $(nginx_workers)
  [ "$#" = 1 ] || return 1
  case " $OLD_WORKERS " in *" $1 "*) return 1 ;; esac
}
has_worker() { [ -n "$(nginx_workers)" ]; }
wait_for "nginx's worker" has_worker
OLD_WORKERS=$(nginx_workers)

register() { # id port
  curl -sf -X PUT "$CONSUL/v1/agent/service/register" -d @- <<EOF
{"ID": "$1", "Name": "web", "Address": "127.0.0.1", "Port": $2, "Tags": ["demo"],
 "Check": {"CheckID": "$1-http", "HTTP": "http://127.0.0.1:$2/", "Interval": "1s"}}
EOF
}
deregister() { curl -sf -X PUT "$CONSUL/v1/agent/service/deregister/$1"; }
servers() { grep -c '^    server 127.0.0.1:[0-9]*;' "$DEMO/nginx/upstream.conf" || true; }
# serves NAME: some of nine requests reach backend NAME.
serves() { for _ in 1 2 3 4 5 6 7 8 9; do curl -s "http://127.0.0.1:$LB_PORT/" | grep -q "$1" && return 0; done; return 1; }
# avoids NAME: none of nine requests reaches it.
avoids() { for _ in 1 2 3 4 5 6 7 8 9; do curl -s "http://127.0.0.1:$LB_PORT/" | grep -q "$1" && return 1; done; return 0; }

traffic() {
  echo "six requests through the load balancer on :$LB_PORT:"
  for _ in 1 2 3 4 5 6; do curl -s "http://127.0.0.1:$LB_PORT/" | sed 's/^/    /'; done
}

say "Registering web-1 and web-2 in Consul"
register web-1 "$B1"; register web-2 "$B2"

say "Starting ctsync with examples/load-balancer"
cat >"$DEMO/demo.tfvars" <<EOF
service_name   = "web"
upstream_file  = "$DEMO/nginx/upstream.conf"
reload_command = "$NGINX -p $DEMO/nginx -c $DEMO/nginx/nginx.conf -s reload"
EOF
DASHBOARD="http://127.0.0.1:$API_PORT/ui/"
cat >"$DEMO/config.hcl" <<EOF
log_level   = "INFO"
working_dir = "$DEMO/sync-tasks"
port        = $API_PORT

consul {
  address = "127.0.0.1:$CONSUL_PORT"
}

buffer_period {
  enabled = false
}

task {
  name           = "nginx-web"
  description    = "nginx upstream for the healthy instances of web"
  module         = "$ROOT/examples/load-balancer"
  providers      = []
  variable_files = ["$DEMO/demo.tfvars"]

  condition "services" {
    names = ["web"]
  }
}
EOF
setsid "$CTSYNC" start -config-file "$DEMO/config.hcl" >"$DEMO/ctsync.log" 2>&1 &
PIDS+=($!)
wait_for "two upstream servers" bash -c "[ \"\$(grep -c '^    server 127.0.0.1:[0-9]*;' $DEMO/nginx/upstream.conf)\" = 2 ]"
echo "dashboard: $DASHBOARD"
wait_for "nginx's reload to finish" reloaded
wait_for "nginx to send traffic to web-1" serves web-1
wait_for "nginx to send traffic to web-2" serves web-2
echo "nginx upstream rendered by ctsync:"; sed 's/^/    /' "$DEMO/nginx/upstream.conf"
traffic

say "Registering web-3: ctsync adds it"
OLD_WORKERS=$(nginx_workers)
register web-3 "$B3"
wait_for "three upstream servers" bash -c "[ \"\$(grep -c '^    server 127.0.0.1:[0-9]*;' $DEMO/nginx/upstream.conf)\" = 3 ]"
wait_for "nginx's reload to finish" reloaded
wait_for "nginx to send traffic to web-3" serves web-3
sed 's/^/    /' "$DEMO/nginx/upstream.conf"
traffic

say "Deregistering web-1: ctsync removes it"
OLD_WORKERS=$(nginx_workers)
deregister web-1
wait_for "two upstream servers" bash -c "[ \"\$(grep -c '^    server 127.0.0.1:[0-9]*;' $DEMO/nginx/upstream.conf)\" = 2 ]"
wait_for "nginx's reload to finish" reloaded
wait_for "nginx to stop sending traffic to web-1" avoids web-1
sed 's/^/    /' "$DEMO/nginx/upstream.conf"
traffic

say "ctsync's log"
grep -E 'executing task|task completed|error applying task' "$DEMO/ctsync.log" | sed 's/^/    /' | tail -n 12
say "Demo done: $(servers) backends in rotation"
if [ "${CTSYNC_DEMO_EXIT:-0}" = 1 ]; then exit 0; fi
cat <<EOF
Everything keeps running until you press Ctrl-C:
  dashboard       $DASHBOARD   (open a run: its plan, log, what changed in Consul)
  load balancer   http://127.0.0.1:$LB_PORT/
  Consul          $CONSUL/ui/
  register web-1 again (ctsync adds it to nginx, and the dashboard shows the run):
    curl -X PUT $CONSUL/v1/agent/service/register -d '{"ID":"web-1","Name":"web","Address":"127.0.0.1","Port":$B1}'
  ctsync's log    $DEMO/ctsync.log
EOF
# Wait for Ctrl-C (the EXIT trap stops everything), or for a process that
# stops on its own.
wait -n "${PIDS[@]}" || true
echo "a demo process stopped on its own; see the end of ctsync's log:" >&2
tail -n 20 "$DEMO/ctsync.log" >&2 || true
exit 1
