# Helpers for test/bench/run: the throwaway cluster, the Kafka test broker, the nginx sink, the
# way messages are queued and drained, and the report (one line per figure, a Markdown table at
# the end). Sourced by test/bench/run, as the (non-root) bench user; everything listens on
# 127.0.0.1 or on a Unix socket in $WORK.
#
# Expects: ROOT (the repository), WORK (a private temp dir), BIN (the built bench tools).

PGPORT=${PGPORT:-54339}
DB=bench
RESULTS=$WORK/results.tsv       # name, value, unit, floor label, floor value, floor unit, ratio, target, note
: > "$RESULTS"

log() { printf '   %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

#-------------------------------------------------------------------------------------------
# PostgreSQL
#-------------------------------------------------------------------------------------------
CONNINFO="host=$WORK port=$PGPORT dbname=$DB"

psql_() {
    PGOPTIONS="-c client_min_messages=warning ${PGOPTIONS:-}" \
        command psql -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PGPORT" -d "$DB" "$@"
}
# One value (or rows, |-separated) of a query.
sql() { psql_ -At -c "$1"; }

start_cluster() {
    initdb -D "$WORK/data" -A trust -U "$(id -un)" >"$WORK/initdb.log" 2>&1 || die "initdb failed"
    cat >> "$WORK/data/postgresql.conf" <<CONF
# test/bench: durable like production, sized so a 10M backlog stays in memory
listen_addresses = ''
unix_socket_directories = '$WORK'
port = $PGPORT
max_connections = 100
shared_buffers = 2GB
max_wal_size = 8GB
checkpoint_timeout = 30min
fsync = on
synchronous_commit = on
full_page_writes = on
shared_preload_libraries = 'outbox'
outbox.databases = '$DB'
outbox.webhook_allowed_networks = '127.0.0.0/8, ::1'
log_checkpoints = on
log_autovacuum_min_duration = 0
${PG_EXTRA_CONF:-}
CONF
    pg_ctl -D "$WORK/data" -l "$WORK/server.log" -w -t 120 start >/dev/null || {
        tail -20 "$WORK/server.log" >&2; die "PostgreSQL did not start"; }
    command psql -X -q -h "$WORK" -p "$PGPORT" -d postgres -c "CREATE DATABASE $DB" >/dev/null
    sql "CREATE EXTENSION outbox; CREATE SCHEMA bench" >/dev/null
    wait_for "a worker in outbox.workers()" 30 \
        "[ \"\$(sql 'SELECT count(*) FROM outbox.workers()')\" -ge 1 ]"
}

stop_cluster() {
    [ -f "$WORK/data/postmaster.pid" ] && pg_ctl -D "$WORK/data" -m fast stop >/dev/null 2>&1
    return 0
}

# wait_for WHAT SECONDS COMMAND: evaluates COMMAND every 0.1 s until it succeeds.
wait_for() {
    local what=$1 timeout=$2 cmd=$3 deadline
    deadline=$(( $(date +%s) + timeout ))
    until eval "$cmd"; do
        [ "$(date +%s)" -ge "$deadline" ] && { log "timed out after ${timeout}s waiting for $what"; return 1; }
        sleep 0.1
    done
}

worker_pid() { sql "SELECT pid FROM outbox.workers() WHERE database = '$DB' ORDER BY pid LIMIT 1"; }

checkpoint() { sql "CHECKPOINT" >/dev/null; }

# The JSON payload of message g (~150 bytes), as an SQL expression over an integer g; the key is
# one of 1000 customers.
PAYLOAD_SQL="jsonb_build_object('order_id', g, 'customer', 'customer-' || (g % 1000),
    'status', 'created', 'amount', round((g % 10000) * 1.37, 2), 'currency', 'EUR',
    'items', g % 7 + 1, 'placed_at', '2024-05-01T12:00:00Z', 'channel', 'web')"
KEY_SQL="'customer-' || (g % 1000)"

# queue_messages DEST N: N messages for DEST in transactions of 50,000 rows (each row through
# the producer trigger, as an application's INSERT would).
queue_messages() {
    local dest=$1 n=$2 chunk=50000
    psql_ >/dev/null <<SQL
DO \$\$
DECLARE
    done_rows bigint := 0;
BEGIN
    WHILE done_rows < $n LOOP
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$dest', $KEY_SQL, $PAYLOAD_SQL
          FROM generate_series(done_rows + 1, least(done_rows + $chunk, $n)) AS g;
        done_rows := done_rows + $chunk;
        COMMIT;
    END LOOP;
END
\$\$;
SQL
}

# The backlog is gone: no row left, and outbox.stats() agrees for every destination.
queue_empty() {
    [ "$(sql "SELECT count(*) FROM outbox.stats() WHERE pending + in_flight + retrying + waiting > 0")" = 0 ]
}

# Removes every queued message and dead letter at once (between benchmarks).
clear_queue() {
    sql "TRUNCATE outbox.messages, outbox.dead_letters" >/dev/null
}

#-------------------------------------------------------------------------------------------
# Kafka test broker (librdkafka's mock cluster; keeps only ~100k messages / 5 MB per partition,
# so deliveries are counted by end offsets, never by reading everything back)
#-------------------------------------------------------------------------------------------
start_broker() {
    "$ROOT/test/tools/kafka_broker" --bootstrap-file "$WORK/bootstrap" \
        --control-file "$WORK/control" >"$WORK/broker.out" 2>&1 &
    BROKER_PID=$!
    wait_for "the Kafka test broker" 30 "[ -s '$WORK/bootstrap' ] && [ -s '$WORK/control' ]" \
        || die "the Kafka test broker did not start"
    BOOTSTRAP=$(cat "$WORK/bootstrap")
}

stop_broker() {
    [ -n "${BROKER_PID:-}" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null
    BROKER_PID=
    return 0
}

# Sum of the end offsets of a topic's 4 partitions.
topic_end_offsets() {
    local topic=$1 sum=0 p off
    for p in 0 1 2 3; do
        off=$(kcat -Q -b "$BOOTSTRAP" -t "$topic:$p:-1" 2>/dev/null | sed -n 's/.*\[[0-9]*\] *offset *\(-\{0,1\}[0-9]*\).*/\1/p')
        [ -n "$off" ] && [ "$off" -gt 0 ] && sum=$((sum + off))
    done
    echo "$sum"
}

# create_kafka_destination NAME TOPIC [EXTRA_JSON_MEMBERS]: created paused.
create_kafka_destination() {
    local name=$1 topic=$2 extra=${3:-}
    sql "SELECT outbox.create_destination('$name', 'kafka',
           '{\"bootstrap.servers\": \"$BOOTSTRAP\", \"topic\": \"$topic\"${extra:+, $extra}}');
         SELECT outbox.pause('$name')" >/dev/null
}

#-------------------------------------------------------------------------------------------
# Real Apache Kafka (test/tools/kafka_cluster): a controller and three brokers on 127.0.0.1,
# replication factor 3, min.insync.replicas 2, in $WORK/kafka (or one broker, replication factor
# 1, in $WORK/kafka1: start_real_kafka 1); the full JIT (the tests run the brokers with C1 only,
# which starts faster but runs slower) and 768 MB of heap per broker
#-------------------------------------------------------------------------------------------
RK_DIR=${WORK:-}/kafka
kc() { OUTBOX_KAFKA_JIT=full OUTBOX_KAFKA_HEAP=768m "$ROOT/test/tools/kafka_cluster" --dir "$RK_DIR" "$@"; }

# start_real_kafka [BROKERS]: 3 (the default) or 1
start_real_kafka() {
    local brokers=${1:-3}
    RK_DIR=$WORK/kafka
    [ "$brokers" = 3 ] || RK_DIR=$WORK/kafka$brokers
    kc start --brokers "$brokers" --timeout 300 >"$WORK/kafka-start.out" 2>&1 || {
        cat "$WORK/kafka-start.out" >&2; return 1; }
    RK_BOOTSTRAP=$(kc bootstrap)
    RK_VERSION=$(kc info | sed -n 's/.*"kafka_version": "\([^"]*\)".*/\1/p')
}

stop_real_kafka() {
    local d
    for d in "$WORK/kafka" "$WORK/kafka1"; do
        [ -d "$d" ] && RK_DIR=$d kc stop --kill >/dev/null 2>&1
    done
    return 0
}

# Sum of a topic's end offsets on the real cluster (Kafka's own consumer).
rk_end_offsets() { kc verify offsets --bootstrap "$RK_BOOTSTRAP" --topic "$1" | sed -n 's/^sum=//p'; }

#-------------------------------------------------------------------------------------------
# nginx sink: answers every request with 204, keep-alive, runs as the bench user
#-------------------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_nginx() {
    local dir=$WORK/nginx
    mkdir -p "$dir/tmp"
    NGINX_PORT=$(free_port)
    cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    keepalive_timeout 120s;
    keepalive_requests 10000000;
    client_body_buffer_size 64k;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / { return 204; }
    }
}
CONF
    nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" 2>>"$dir/error.log" || die "nginx did not start"
    NGINX_URL="http://127.0.0.1:$NGINX_PORT/hook"
    wait_for "nginx" 10 "curl -s -o /dev/null -X POST '$NGINX_URL'" || die "nginx does not answer"
}

stop_nginx() {
    local pidfile=$WORK/nginx/nginx.pid
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
    return 0
}

#-------------------------------------------------------------------------------------------
# Process figures
#-------------------------------------------------------------------------------------------
# proc_kb PID FIELD: a /proc/PID/status field in kB (VmRSS, RssAnon, RssShmem, VmHWM ...).
proc_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null; }

#-------------------------------------------------------------------------------------------
# Report
#-------------------------------------------------------------------------------------------
# 52300 -> 52,300 (integers only; decimals are printed as given).
num() {
    if [[ $1 =~ ^-?[0-9]+$ ]]; then
        echo "$1" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta'
    else
        echo "$1"
    fi
}
# Rounds to an integer.
int() { printf '%.0f' "$1"; }
# calc EXPR: floating point arithmetic (awk), 4 significant decimals.
calc() { awk "BEGIN { v = $1; printf \"%.4g\", v }"; }

# check VALUE OP LIMIT: "ok" or "MISSED" (OP is >=, <=, < or >); "" when VALUE is not a number.
check() {
    awk -v v="$1" -v op="$2" -v x="$3" 'BEGIN {
        if (v !~ /^-?[0-9.]+$/) { print ""; exit }
        ok = (op == ">=") ? (v + 0 >= x) : (op == "<=") ? (v + 0 <= x) : (op == "<") ? (v + 0 < x) : (v + 0 > x);
        print ok ? "ok" : "MISSED" }'
}

# ratio A B: A / B with 2 decimals ("-" when B is 0 or missing).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }

# report NAME VALUE UNIT FLOOR_LABEL FLOOR_VALUE FLOOR_UNIT RATIO TARGET VERDICT [NOTE]
# Prints one aligned line and records the figure for the Markdown table. TARGET is free text
# (e.g. "ratio >= 0.80"); VERDICT is what `check` said about it (or empty).
report() {
    local name=$1 value=$2 unit=$3 flabel=$4 fvalue=$5 funit=$6 ratio=$7 target=$8 verdict=$9
    local note=${10:-} floor=""
    [ -n "$flabel" ] && floor="floor $flabel $(num "$fvalue") $funit"
    printf '%-30s %12s %-7s %-48s ratio %-5s %s%s%s\n' \
        "$name" "$(num "$value")" "$unit" "$floor" "$ratio" "${target:+target $target}" \
        "${verdict:+ [$verdict]}" "${note:+  ($note)}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$value" "$unit" "$flabel" \
        "$fvalue" "$funit" "$ratio" "$target" "$verdict" "$note" >> "$RESULTS"
}

# A line that carries a problem instead of a figure (e.g. a destination that did not deliver).
report_failure() {
    local name=$1 why=$2
    printf '%-28s FAILED: %s\n' "$name" "$why"
    printf '%s\t-\t\t\t\t\t-\t\tFAILED\t%s\n' "$name" "$why" >> "$RESULTS"
}

# The Markdown table of every figure of this run.
results_markdown() {
    echo "| figure | value | floor, same run | ratio | target | |"
    echo "|---|---:|---|---:|---|---|"
    awk -F '\t' '
        function num(v,   s, neg) {
            if (v !~ /^-?[0-9]+$/) return v
            neg = (v ~ /^-/); if (neg) v = substr(v, 2)
            s = ""
            while (length(v) > 3) { s = "," substr(v, length(v) - 2) s; v = substr(v, 1, length(v) - 3) }
            return (neg ? "-" : "") v s
        }
        {
            value = ($2 == "-") ? "-" : num($2) " " $3
            floor = ($4 != "") ? $4 ": " num($5) " " $6 : ""
            verdict = ($9 != "") ? "**" $9 "**" : ""
            note = ($10 != "") ? (verdict != "" ? " — " : "") $10 : ""
            printf "| %s | %s | %s | %s | %s | %s%s |\n", $1, value, floor, $7, $8, verdict, note
        }' "$RESULTS"
}
