# The peers benchmark (`test/bench/run --only peers`): Debezium's embedded engine with the
# PostgreSQL connector (pgoutput) and the outbox event router, side by side with outbox, on the
# same PostgreSQL cluster (wal_level = logical for the whole run) and the same three-broker
# Apache Kafka cluster, in one run. Sourced by test/bench/run (inner part, as the bench user);
# see test/bench/README.md, "peers", for what each figure means.
#
# Expects from run/lib.sh: WORK, BIN, DB, PGPORT, sql, psql_, report, calc, int, ratio, check,
# field, short, kc, start_real_kafka, stop_real_kafka, queue_messages, worker_pid, checkpoint;
# PEERS_CP: the class path printed by test/bench/peers/build.

PEERS_TOPIC_OUTBOX=peers_outbox
PEERS_TOPIC_DBZ=peers_dbz
PEERS_TOPIC_DIRECT=peers_direct
DBZ_TABLE=bench.dbz_outbox
DBZ_SLOT=dbz_outbox
DBZ_PUBLICATION=dbz_outbox
# Debezium tuned for latency: its connector sleeps poll.interval.ms (500 by default) whenever
# the replication stream has nothing, and its queue waits as long for a batch to fill.
DBZ_TUNED=(--set poll.interval.ms=1)
PEERS_JDBC="jdbc:postgresql://127.0.0.1:$PGPORT/$DB?user=$(id -un)"
PEERS_JAVA=(java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$PEERS_CP" outbox.peers.Main)
DBZ_PID=
DBZ_RUN=0
PEERS_BG=()   # background helpers (watchers, the listener), ended by peers_cleanup

# On the way out (run's cleanup): the engine and any helper still running, by pid.
peers_cleanup() {
    dbz_stop
    local p
    for p in "${PEERS_BG[@]}"; do kill "$p" 2>/dev/null || true; done
    return 0
}
PEERS_TSV=$WORK/peers.tsv

peers_now_ms() { date +%s%3N; }
peers_lsn() { sql "SELECT pg_current_wal_lsn()"; }
peers_wal_bytes() { sql "SELECT pg_wal_lsn_diff('$2', '$1')::bigint"; }
# peers_fpi_bytes A B: how much of the WAL between two LSNs is full-page images (pg_walinspect)
peers_fpi_bytes() {
    wait_for "the WAL flushed to $2" 30 "[ \"\$(sql \"SELECT pg_current_wal_flush_lsn() >= '$2'\")\" = t ]" || { echo 0; return; }
    sql "SELECT coalesce(sum(fpi_length), 0) FROM pg_get_wal_records_info('$1', '$2')"
}

# report_peer NAME OUTBOX DEBEZIUM UNIT RATIO TARGET VERDICT [NOTE]: one line, outbox first,
# Debezium where the other lines have their floor; also kept for the peers table.
report_peer() {
    local name=$1 ours=$2 theirs=$3 unit=$4 r=$5 target=$6 verdict=$7 note=${8:-}
    report "$name" "$ours" "$unit" "Debezium" "$theirs" "$unit" "$r" "$target" "$verdict" "$note" |
        sed 's/ floor Debezium / Debezium /'
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$ours" "$theirs" "$unit" "$r" "$target" \
        "$verdict" "$note" >> "$PEERS_TSV"
}

# The table of the peers lines, written to the results file (docs/benchmarks.md shows the latest).
peers_markdown() {
    echo "| figure | outbox | Debezium $DBZ_VERSION | ratio | target | |"
    echo "|---|---:|---:|---:|---|---|"
    awk -F '\t' '
        function num(v,   s) {
            if (v !~ /^[0-9]+$/) return v
            s = ""
            while (length(v) > 3) { s = "," substr(v, length(v) - 2) s; v = substr(v, 1, length(v) - 3) }
            return v s
        }
        { verdict = ($7 != "") ? "**" $7 "**" : ""
          printf "| %s | %s %s | %s %s | %s | %s | %s%s%s |\n", $1, num($2), $4, num($3), $4, $5, $6,
                 verdict, ($8 != "" && verdict != "") ? " — " : "", $8 }' "$PEERS_TSV"
}

#-------------------------------------------------------------------------------------------
# Processes: CPU seconds, memory
#-------------------------------------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
# CPU seconds (user + system, all threads) of the given pids.
proc_cpu() {
    local t=0 p v
    for p in "$@"; do
        v=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)
        t=$((t + v))
    done
    calc "$t / $CLK_TCK"
}
# Private resident memory in kB (RssAnon + RssFile: the heap, the code, not shared_buffers).
proc_private_kb() { awk '$1 == "RssAnon:" || $1 == "RssFile:" { s += $2 } END { print s + 0 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# Our relay: the worker, and its driver helper (outbox-driver) when the build has one.
outbox_relay_pids() {
    local w
    w=$(worker_pid)
    echo "$w $(ps -o pid= -o comm= --ppid "$w" 2>/dev/null | awk '$2 ~ /^outbox-driver/ { print $1 }' | tr '\n' ' ')"
}
# Debezium's walsender (the logical decoding runs there, in a PostgreSQL backend).
dbz_walsender_pid() { sql "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$DBZ_SLOT' AND active"; }

# rss_sampler FILE PID...: every 0.5 s, one line "total pid1 pid2 ..." of private kB, until killed
# (or until the bench is gone).
rss_sampler() {
    local file=$1 bench=$$; shift
    while kill -0 "$bench" 2>/dev/null; do
        local line="" total=0 p kb
        for p in "$@"; do kb=$(proc_private_kb "$p"); total=$((total + kb)); line="$line $kb"; done
        echo "$total$line"
        sleep 0.5
    done > "$file"
}
rss_peak_mb() { awk -v c="${2:-1}" '{ if ($c > m) m = $c } END { printf "%.0f", m / 1024 }' "$1"; }

#-------------------------------------------------------------------------------------------
# Kafka: the same independent client for both (Kafka's own Java consumer, test/bench/peers)
#-------------------------------------------------------------------------------------------
topic_sum() { "${PEERS_JAVA[@]}" offsets --bootstrap "$RK_BOOTSTRAP" --topic "$1" | sed -n 's/^sum=//p'; }
# wait_topic TOPIC TARGET TIMEOUT_S: "MS SUM", the epoch ms at which the topic held TARGET
# messages, or at which the timeout struck (then SUM < TARGET).
wait_topic() {
    "${PEERS_JAVA[@]}" offsets --bootstrap "$RK_BOOTSTRAP" --topic "$1" --interval-ms 50 \
        --until "$2" --timeout "$3" | sed -n 's/^[a-z]* ms=\([0-9]*\) sum=\([0-9]*\)$/\1 \2/p' || true
}
# The topic's count at an epoch ms, from a watch file ("ms=T sum=N" lines): the last sample
# taken at or before it.
sum_at() { awk -v t="$2" '{ split($1, a, "="); split($2, b, "="); if (a[2] <= t) s = b[2] } END { print s + 0 }' "$1"; }

# watch_until FILE TARGET TIMEOUT_S: "MS SUM" from a running watcher's file: its first sample
# holding TARGET messages, or its last one when TIMEOUT_S passed first.
watch_until() {
    local file=$1 target=$2 deadline line
    deadline=$(( $(peers_now_ms) + $3 * 1000 ))
    while :; do
        line=$(awk -v t="$2" '{ split($1, a, "="); split($2, b, "=") } b[2] >= t { print a[2], b[2]; exit }' "$file")
        if [ -n "$line" ]; then echo "$line"; return; fi
        [ "$(peers_now_ms)" -lt "$deadline" ] || break
        sleep 0.2
    done
    awk '{ split($1, a, "="); split($2, b, "="); ms = a[2]; n = b[2] } END { if (ms != "") print ms, n }' "$file"
}

# What each topic holds once everything committed so far is delivered: every message inserted
# for it since it was created (both relays deliver each once: idempotent producers).
EXPECT_outbox=0 EXPECT_debezium=0
expect() { local v="EXPECT_$1"; printf -v "$v" '%s' "$(( ${!v} + $2 ))"; }
peers_topic() {
    case $1 in
        debezium) echo "$PEERS_TOPIC_DBZ" ;;
        direct) echo "$PEERS_TOPIC_DIRECT" ;;
        *) echo "$PEERS_TOPIC_OUTBOX" ;;
    esac
}
# caught_up SYSTEM TIMEOUT_S: waits until the system's topic holds all it should; "MS SUM".
caught_up() { local v="EXPECT_$1"; wait_topic "$(peers_topic "$1")" "${!v}" "$2"; }

#-------------------------------------------------------------------------------------------
# Debezium's engine (one JVM), started and stopped by pid
#-------------------------------------------------------------------------------------------
# dbz_start [--set k=v]...: starts the engine and waits until its task runs and its walsender
# is attached to the slot. Sets DBZ_PID, DBZ_OUT (its stdout), DBZ_LAUNCH_MS.
dbz_start() {
    DBZ_RUN=$((DBZ_RUN + 1))
    DBZ_OUT=$WORK/debezium-$DBZ_RUN.out
    DBZ_LAUNCH_MS=$(peers_now_ms)
    : > "$DBZ_OUT"
    java -Xmx1g -Dorg.slf4j.simpleLogger.defaultLogLevel=info -cp "$PEERS_CP" outbox.peers.Main debezium \
        --pg-host 127.0.0.1 --pg-port "$PGPORT" --dbname "$DB" --user "$(id -un)" \
        --table "$DBZ_TABLE" --slot "$DBZ_SLOT" --publication "$DBZ_PUBLICATION" \
        --topic "$PEERS_TOPIC_DBZ" --bootstrap "$RK_BOOTSTRAP" --offsets "$WORK/debezium.offsets" "$@" \
        > "$DBZ_OUT" 2> "$WORK/debezium-$DBZ_RUN.log" &
    DBZ_PID=$!
    wait_for "Debezium's task" 240 "grep -q '^task_started_ms=' '$DBZ_OUT' || ! kill -0 $DBZ_PID 2>/dev/null" || true
    if ! kill -0 "$DBZ_PID" 2>/dev/null || ! grep -q '^task_started_ms=' "$DBZ_OUT"; then
        tail -20 "$WORK/debezium-$DBZ_RUN.log" >&2
        return 1
    fi
    wait_for "Debezium's walsender" 120 "[ -n \"\$(dbz_walsender_pid)\" ]"
}

dbz_stop() {
    [ -n "$DBZ_PID" ] || return 0
    kill -TERM "$DBZ_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 600); do kill -0 "$DBZ_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$DBZ_PID" 2>/dev/null || true
    wait "$DBZ_PID" 2>/dev/null || true
    DBZ_PID=
    wait_for "the slot to be released" 60 "[ -z \"\$(dbz_walsender_pid)\" ]" || true
}

# The epoch ms of a line KEY=MS in the engine's stdout.
dbz_mark() { sed -n "s/^$1=\\([0-9]*\\)$/\\1/p" "$DBZ_OUT" | head -1; }

#-------------------------------------------------------------------------------------------
# pgbench: single-row INSERT transactions into each table
#-------------------------------------------------------------------------------------------
peers_pgbench_scripts() {
    local json='{"order_id": '"'"' || :k || '"'"', "customer": "customer-'"'"' || (:k % 1000) || '"'"'", "status": "created", "amount": 12.34, "currency": "EUR", "items": 3, "placed_at": "2024-05-01T12:00:00Z", "channel": "web"}'
    local vals="'customer-' || (:k % 1000), ('$json')::jsonb"
    printf '\\set k random(1, 1000000)\nINSERT INTO outbox.messages (destination, key, payload) VALUES (%s, %s);\n' \
        "'peers'" "$vals" > "$WORK/peers-outbox.sql"
    printf '\\set k random(1, 1000000)\nINSERT INTO %s (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), %s, %s);\n' \
        "$DBZ_TABLE" "'orders'" "'customer-' || (:k % 1000), 'OrderCreated', ('$json')::jsonb" > "$WORK/peers-debezium.sql"
    printf '\\set k random(1, 1000000)\nINSERT INTO bench.plain (destination, key, payload) VALUES (%s, %s);\n' \
        "'peers'" "$vals" > "$WORK/peers-plain.sql"
    printf '\\set k random(1, 1000000)\nINSERT INTO bench.notified (destination, key, payload) VALUES (%s, %s);\n' \
        "'peers'" "$vals" > "$WORK/peers-notify.sql"
}

# peers_pgbench SCRIPT CLIENTS SECONDS: "TPS COUNT", pgbench's tps (without connection time) and
# its count of committed transactions (one row each).
peers_pgbench() {
    pgbench -n -h "$WORK" -p "$PGPORT" -c "$2" -j 2 -T "$3" -f "$WORK/peers-$1.sql" "$DB" 2>&1 |
        awk '/^number of transactions actually processed:/ { n = $NF }
             /^tps = .*without initial connection time/ { t = $3 }
             END { if (t != "" && n != "") print t, n }'
}
peers_tps() { peers_pgbench "$@" | cut -d' ' -f1; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

peers_truncate() { sql "TRUNCATE outbox.messages, bench.plain, bench.notified, $DBZ_TABLE" >/dev/null; }

#-------------------------------------------------------------------------------------------
# Setup
#-------------------------------------------------------------------------------------------
peers_setup() {
    psql_ >/dev/null <<SQL
-- Debezium's outbox table, in the shape its outbox event router documents
CREATE TABLE $DBZ_TABLE (
    id            uuid NOT NULL PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb
);
-- only inserts are events (the router ignores deletes; TRUNCATE between runs is not sent)
CREATE PUBLICATION $DBZ_PUBLICATION FOR TABLE $DBZ_TABLE WITH (publish = 'insert');
-- outbox.messages' columns, types and defaults, a primary key, no trigger (as bench_producer)
CREATE TABLE bench.plain (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid NOT NULL DEFAULT gen_random_uuid(),
    destination     text NOT NULL,
    topic           text,
    key             text,
    payload         jsonb,
    payload_bytes   bytea,
    headers         jsonb,
    available_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    lease_token     bigint,
    last_error      text,
    first_failed_at timestamptz,
    waiting         boolean NOT NULL DEFAULT false
);
-- the same with the wake-up of go-outbox, ulak or pgmq: an AFTER INSERT trigger calling pg_notify
CREATE TABLE bench.notified (LIKE bench.plain INCLUDING ALL);
CREATE FUNCTION bench.notify_relay() RETURNS trigger LANGUAGE plpgsql AS
\$\$ BEGIN PERFORM pg_notify('outbox_bench', TG_TABLE_NAME); RETURN NULL; END \$\$;
CREATE TRIGGER notify_relay AFTER INSERT ON bench.notified FOR EACH ROW EXECUTE FUNCTION bench.notify_relay();
SQL
    sql "SELECT outbox.create_destination('peers', 'kafka',
           '{\"bootstrap.servers\": \"$RK_BOOTSTRAP\", \"topic\": \"$PEERS_TOPIC_OUTBOX\"}');
         SELECT outbox.pause('peers')" >/dev/null
    peers_pgbench_scripts
}

#-------------------------------------------------------------------------------------------
# (0) What wal_level = logical costs our producers: outbox.messages, 16 clients, replica vs
#     logical, alternated (a restart each), before any replication slot exists
#-------------------------------------------------------------------------------------------
peers_restart() {
    sql "ALTER SYSTEM SET wal_level = '$1'" >/dev/null
    pg_ctl -D "$WORK/data" -l "$WORK/server.log" -w -t 120 restart >/dev/null
    wait_for "a worker in outbox.workers()" 30 "[ \"\$(sql 'SELECT count(*) FROM outbox.workers()')\" -ge 1 ]"
}

peers_wal_level() {
    echo "   -- (0) wal_level: outbox.messages, 16 clients, replica vs logical"
    local round level tps; local -a logical=() replica=()
    for round in $(seq 1 "$PEERS_ROUNDS"); do
        for level in replica logical; do
            peers_restart "$level"
            peers_truncate; checkpoint
            tps=$(peers_tps outbox 16 "$PEERS_PGBENCH_S")
            if [ "$level" = logical ]; then logical+=("$tps"); else replica+=("$tps"); fi
        done
    done
    [ "$(sql "SHOW wal_level")" = logical ] || die "wal_level is not logical after the comparison"
    local ml mr r
    ml=$(median "${logical[@]}") mr=$(median "${replica[@]}")
    r=$(ratio "$ml" "$mr")
    report "peers: producer, wal_level logical" "$(int "$ml")" tps "wal_level replica" "$(int "$mr")" tps "$r" \
        "" "" "outbox.messages (paused), 16 clients, 1 row/tx; median of $PEERS_ROUNDS x ${PEERS_PGBENCH_S}s alternated; logical$(printf ' %.0f' "${logical[@]}") / replica$(printf ' %.0f' "${replica[@]}")"
}

#-------------------------------------------------------------------------------------------
# (4) producer cost with the relays idle, and (6) the wake-up: pgbench, single-row INSERTs,
#     alternated table by table: outbox.messages (its destination paused: the insert check and
#     the commit callback), Debezium's table (no trigger, engine stopped), a plain table, and
#     the plain table with a pg_notify trigger (a listener reading every notification)
#-------------------------------------------------------------------------------------------
peers_producers() {
    echo "   -- (4) producer cost, relays idle, and (6) the wake-up: pg_notify trigger vs commit callback"
    sql "SELECT outbox.pause('peers')" >/dev/null
    "${PEERS_JAVA[@]}" listen --jdbc "$PEERS_JDBC" --channel outbox_bench --timeout 3600 > "$WORK/listen.out" 2>&1 &
    local listener=$!
    PEERS_BG+=("$listener")
    wait_for "the LISTEN session" 60 "grep -q listening '$WORK/listen.out'" || true
    local clients table round tps
    declare -A runs=()
    for clients in 16 64; do
        local tables="outbox debezium plain notify"
        if [ "$clients" = 64 ]; then tables="outbox plain notify"; fi
        for round in $(seq 1 "$PEERS_ROUNDS"); do
            for table in $tables; do
                peers_truncate; checkpoint
                tps=$(peers_tps "$table" "$clients" "$PEERS_PGBENCH_S")
                [ -n "$tps" ] || { report_failure "peers: producer $table" "pgbench failed"; kill "$listener"; return; }
                runs[$table-$clients]="${runs[$table-$clients]:-} $(int "$tps")"
            done
        done
    done
    kill -TERM "$listener" 2>/dev/null; wait "$listener" 2>/dev/null || true
    peers_truncate
    local -A med=()
    local k
    for k in "${!runs[@]}"; do
        # shellcheck disable=SC2086
        med[$k]=$(median ${runs[$k]})
    done
    # Reported with the other outbox-vs-Debezium lines, in peers_report.
    PRODUCER_IDLE="outbox=$(int "${med[outbox-16]}") debezium=$(int "${med[debezium-16]}") plain=$(int "${med[plain-16]}")"
    PRODUCER_IDLE_NOTE="1 row/tx; plain table $(int "${med[plain-16]}") tps (outbox $(ratio "${med[outbox-16]}" "${med[plain-16]}"), Debezium's table $(ratio "${med[debezium-16]}" "${med[plain-16]}") of it); median of $PEERS_ROUNDS x ${PEERS_PGBENCH_S}s alternated; outbox${runs[outbox-16]} / Debezium${runs[debezium-16]} / plain${runs[plain-16]}"
    for clients in 16 64; do
        local n=${med[notify-$clients]} o=${med[outbox-$clients]} p=${med[plain-$clients]}
        report "wake-up, $clients clients: pg_notify trigger" "$(int "$n")" tps "plain table" "$(int "$p")" tps \
            "$(ratio "$n" "$p")" "" "" "AFTER INSERT trigger calling pg_notify, one listener reading; runs${runs[notify-$clients]}"
        report "wake-up, $clients clients: outbox commit callback" "$(int "$o")" tps "plain table" "$(int "$p")" tps \
            "$(ratio "$o" "$p")" "" "" "outbox.messages (insert check, UUIDv7, 3 indexes, wake at commit) is $(ratio "$o" "$n") x the pg_notify table; runs${runs[outbox-$clients]}"
    done
    log "the listener read $(sed -n 's/^notifications=//p' "$WORK/listen.out") notifications"
}

#-------------------------------------------------------------------------------------------
# (1) commit -> consumer latency at 1,000 msg/s, one consumer (test/bench/peers LatencyProbe)
#-------------------------------------------------------------------------------------------
# peers_latency SYSTEM LABEL SECONDS: sets LAT_<SYSTEM>_<LABEL> to the probe's output line.
peers_latency() {
    local system=$1 label=$2 seconds=$3 out
    local -a target=(--destination peers)
    if [ "$system" = debezium ]; then target=(--table "$DBZ_TABLE"); fi
    if [ "$system" = direct ]; then target=(); fi
    # 16 connections: the commits keep the pace even when one fsync takes 10 ms or more.
    out=$("${PEERS_JAVA[@]}" latency --system "$system" "${target[@]}" --jdbc "$PEERS_JDBC" \
            --bootstrap "$RK_BOOTSTRAP" --topic "$(peers_topic "$system")" \
            --rate 1000 --connections 16 --duration "$seconds" --drain-timeout "$PEERS_CATCHUP_S" \
            --dump "$WORK/peers-latency-$system-$label.txt") || out="failed"
    [ "$system" = direct ] || expect "$system" "$(field "$out" sent)"
    log "latency $system ($label): $out"
    printf -v "LAT_${system}_${label}" '%s' "$out"
}

# Warm-up before anything is timed: 100 messages, then a few seconds of the latency run itself
# (a JVM compiles its hot paths as it runs them; the worker's producer connects).
peers_warm_up() {
    local system=$1
    if [ "$system" = debezium ]; then
        sql "INSERT INTO $DBZ_TABLE SELECT gen_random_uuid(), 'orders', 'warm-up', 'OrderCreated', '{}' FROM generate_series(1, 100)" >/dev/null
    else
        sql "SELECT outbox.resume('peers')" >/dev/null
        sql "INSERT INTO outbox.messages (destination, key, payload) SELECT 'peers', 'warm-up', '{}' FROM generate_series(1, 100)" >/dev/null
    fi
    expect "$system" 100
    local r v="EXPECT_$system"
    r=$(caught_up "$system" "$PEERS_CATCHUP_S")
    [ "${r#* }" -ge "${!v}" ] 2>/dev/null || log "WARNING: $system's warm-up messages did not all arrive ($r of ${!v})"
    peers_latency "$system" warmup "$PEERS_WARM_S"
    caught_up "$system" "$PEERS_CATCHUP_S" >/dev/null
}

#-------------------------------------------------------------------------------------------
# (2) sustained: 16 producers as fast as they can for PEERS_TPUT_S, the relay delivering
#-------------------------------------------------------------------------------------------
# peers_sustained SYSTEM PIDS...: sets TP_<SYSTEM> to "key=value ..." figures; PIDS: the relay's
# processes, for their CPU time.
peers_sustained() {
    local system=$1; shift
    local topic script=outbox
    topic=$(peers_topic "$system")
    if [ "$system" = debezium ]; then script=debezium; fi
    peers_truncate; checkpoint
    local lsn0 cpu0 watch t0 t1 tps produced lag="-" pending="-"
    "${PEERS_JAVA[@]}" offsets --bootstrap "$RK_BOOTSTRAP" --topic "$topic" --interval-ms 250 \
        --timeout "$((PEERS_TPUT_S + 600))" > "$WORK/peers-watch-$system.txt" &
    watch=$!
    PEERS_BG+=("$watch")
    wait_for "the offset watcher" 120 "[ -s '$WORK/peers-watch-$system.txt' ]" || true
    lsn0=$(peers_lsn) cpu0=$(proc_cpu "$@")
    t0=$(peers_now_ms)
    read -r tps produced <<<"$(peers_pgbench "$script" 16 "$PEERS_TPUT_S")"
    t1=$(peers_now_ms)
    if [ -z "$produced" ]; then printf -v "TP_$system" 'failed'; kill "$watch"; return 1; fi
    # The backlog the moment the producers stop.
    if [ "$system" = debezium ]; then
        lag=$(sql "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = '$DBZ_SLOT'")
    else
        pending=$(sql "SELECT count(*) FROM outbox.messages")
    fi
    expect "$system" "$produced"
    sleep 0.6  # the watcher's sample after t1
    local at_start at_end v="EXPECT_$system"
    at_start=$(sum_at "$WORK/peers-watch-$system.txt" "$t0") at_end=$(sum_at "$WORK/peers-watch-$system.txt" "$t1")
    # How long the rest took, from the same watcher (a fresh one would count its JVM's start).
    local r done_ms done_sum catch_up
    r=$(watch_until "$WORK/peers-watch-$system.txt" "${!v}" "$PEERS_CATCHUP_S")
    kill "$watch" 2>/dev/null; wait "$watch" 2>/dev/null || true
    read -r done_ms done_sum <<<"$r"
    if [ "${done_sum:-0}" -ge "${!v}" ]; then
        catch_up=$(calc "($done_ms - $t1) / 1000")
    else
        catch_up="over_${PEERS_CATCHUP_S}_($(( ${!v} - ${done_sum:-0} ))_left)"
    fi
    local lsn1 cpu1
    lsn1=$(peers_lsn) cpu1=$(proc_cpu "$@")
    printf -v "TP_$system" 'tps=%s produced=%s delivered_rate=%s backlog=%s lag_bytes=%s pending=%s wal_per_msg=%s cpu_per_1M=%s catch_up_s=%s' \
        "$(int "$tps")" "$produced" "$(int "$(calc "($at_end - $at_start) * 1000 / ($t1 - $t0)")")" \
        "$(( ${!v} - at_end ))" "$lag" "$pending" \
        "$(int "$(calc "$(peers_wal_bytes "$lsn0" "$lsn1") / $produced")")" \
        "$(calc "($cpu1 - $cpu0) * 1000000 / $produced")" "$catch_up"
    v="TP_$system"
    log "sustained $system: ${!v}"
}

#-------------------------------------------------------------------------------------------
# (3) a backlog of PEERS_BACKLOG_N drained, and (5) what the relay spent on it
#-------------------------------------------------------------------------------------------
# What a drain delivered: "seconds=S delivered=D done=yes|no", from T0 (epoch ms) to the wait's
# end (the topic's count reached, or PEERS_DRAIN_TIMEOUT_S).
drain_result() {
    local system=$1 t0=$2 sum0=$3 r ms sum v="EXPECT_$1"
    r=$(caught_up "$system" "$PEERS_DRAIN_TIMEOUT_S")
    read -r ms sum <<<"$r"
    [ -n "$ms" ] || { ms=$(peers_now_ms); sum=$(topic_sum "$(peers_topic "$system")"); }
    echo "seconds=$(calc "($ms - $t0) / 1000") delivered=$((sum - sum0)) done=$([ "$sum" -ge "${!v}" ] && echo yes || echo no)"
}

peers_backlog_outbox() {
    peers_truncate
    sql "SELECT outbox.pause('peers')" >/dev/null
    local lsn0 lsn1 lsn2 lsnd sum0 pids cpu0 cpu1 t0 sampler d
    sql "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null
    lsn0=$(peers_lsn)
    queue_messages peers "$PEERS_BACKLOG_N"
    expect outbox "$PEERS_BACKLOG_N"
    lsn1=$(peers_lsn)
    sql "VACUUM ANALYZE outbox.messages" >/dev/null
    checkpoint
    sum0=$(topic_sum "$PEERS_TOPIC_OUTBOX")
    pids=$(outbox_relay_pids)
    # shellcheck disable=SC2086
    rss_sampler "$WORK/peers-rss-outbox.txt" $pids &
    sampler=$!
    # shellcheck disable=SC2086
    cpu0=$(proc_cpu $pids)
    lsnd=$(peers_lsn)
    t0=$(peers_now_ms)
    sql "SELECT outbox.resume('peers')" >/dev/null
    d=$(drain_result outbox "$t0" "$sum0")
    # shellcheck disable=SC2086
    cpu1=$(proc_cpu $pids)
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
    caught_up outbox "$PEERS_CATCHUP_S" >/dev/null
    wait_for "the queue to empty" 60 queue_empty || true
    lsn2=$(peers_lsn)
    BL_outbox="$d cpu=$(calc "$cpu1 - $cpu0") rss_mb=$(rss_peak_mb "$WORK/peers-rss-outbox.txt") produce_wal=$(peers_wal_bytes "$lsn0" "$lsn1") relay_wal=$(peers_wal_bytes "$lsn1" "$lsn2") relay_fpi=$(peers_fpi_bytes "$lsnd" "$lsn2") pids=$(echo $pids | tr ' ' ',')"
    log "backlog outbox: $BL_outbox"
}

peers_backlog_debezium() {
    dbz_stop
    peers_truncate
    local lsn0 lsn1 lsn2 lsn3 sum0 t0 sampler jvm_cpu0 jvm_cpu1 ws ws_cpu d
    sql "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null
    lsn0=$(peers_lsn)
    psql_ >/dev/null <<SQL
DO \$\$
DECLARE
    done_rows bigint := 0;
BEGIN
    WHILE done_rows < $PEERS_BACKLOG_N LOOP
        INSERT INTO $DBZ_TABLE (id, aggregatetype, aggregateid, type, payload)
        SELECT gen_random_uuid(), 'orders', $KEY_SQL, 'OrderCreated', $PAYLOAD_SQL
          FROM generate_series(done_rows + 1, least(done_rows + 50000, $PEERS_BACKLOG_N)) AS g;
        done_rows := done_rows + 50000;
        COMMIT;
    END LOOP;
END
\$\$;
SQL
    expect debezium "$PEERS_BACKLOG_N"
    lsn1=$(peers_lsn)
    sql "VACUUM ANALYZE $DBZ_TABLE" >/dev/null
    checkpoint
    sum0=$(topic_sum "$PEERS_TOPIC_DBZ")
    dbz_start "${DBZ_TUNED[@]}" || { BL_debezium="failed"; return; }
    t0=$(dbz_mark task_started_ms)
    jvm_cpu0=$(proc_cpu "$DBZ_PID")
    # The streaming walsender is there once the first record is (the connector may open and
    # close other replication connections while it starts).
    wait_for "Debezium's first record" "$PEERS_DRAIN_TIMEOUT_S" "grep -q '^first_record_ms=' '$DBZ_OUT'" || true
    ws=$(dbz_walsender_pid)
    rss_sampler "$WORK/peers-rss-debezium.txt" "$DBZ_PID" "$ws" &
    sampler=$!
    d=$(drain_result debezium "$t0" "$sum0")
    jvm_cpu1=$(proc_cpu "$DBZ_PID") ws_cpu=$(proc_cpu "$ws")
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
    lsn2=$(peers_lsn)
    [ "$(dbz_walsender_pid)" = "$ws" ] || log "WARNING: Debezium's walsender changed during the drain ($ws -> $(dbz_walsender_pid))"
    # The rows' removal, which outbox's relay does as it delivers and Debezium's outbox pattern
    # leaves to the application (the event router ignores deletes; Debezium's own example
    # deletes each row right after inserting it): the cheapest way, one plain DELETE (a delete
    # record a row, no lock), after the same checkpoint as outbox's drain, so that both pay the
    # full-page images of the pages they change.
    sql "DELETE FROM $DBZ_TABLE" >/dev/null
    lsn3=$(peers_lsn)
    BL_debezium="$d cpu=$(calc "$jvm_cpu1 - $jvm_cpu0 + $ws_cpu") jvm_cpu=$(calc "$jvm_cpu1 - $jvm_cpu0") walsender_cpu=$ws_cpu startup_cpu=$jvm_cpu0 startup_s=$(calc "($t0 - $DBZ_LAUNCH_MS) / 1000") first_record_s=$(calc "($(dbz_mark first_record_ms) - $t0) / 1000") rss_mb=$(rss_peak_mb "$WORK/peers-rss-debezium.txt") jvm_rss_mb=$(rss_peak_mb "$WORK/peers-rss-debezium.txt" 2) walsender_rss_mb=$(rss_peak_mb "$WORK/peers-rss-debezium.txt" 3) produce_wal=$(peers_wal_bytes "$lsn0" "$lsn1") relay_wal=$(peers_wal_bytes "$lsn1" "$lsn2") delete_wal=$(peers_wal_bytes "$lsn2" "$lsn3") delete_fpi=$(peers_fpi_bytes "$lsn2" "$lsn3")"
    log "backlog debezium: $BL_debezium"
}

#-------------------------------------------------------------------------------------------
# The section
#-------------------------------------------------------------------------------------------
bench_peers() {
    echo "== peers: Debezium $DBZ_VERSION (embedded engine, pgoutput, outbox event router) and outbox, one PostgreSQL (wal_level = logical), one Apache Kafka cluster"
    : > "$PEERS_TSV"
    local t0=$SECONDS
    start_real_kafka || { report_failure "peers" "the Kafka cluster did not start"; return; }
    kc create-topic "$PEERS_TOPIC_OUTBOX" "$PEERS_TOPIC_DBZ" "$PEERS_TOPIC_DIRECT" --partitions 6 >/dev/null
    log "Apache Kafka $RK_VERSION up in $((SECONDS - t0)) s: $RK_BOOTSTRAP; topics with 6 partitions, RF 3, min.insync.replicas 2"
    clear_queue
    peers_setup

    peers_wal_level
    peers_producers

    # Debezium: the engine creates its slot at its first start (snapshot.mode = no_data).
    echo "   -- Debezium: latency, sustained, backlog"
    dbz_start "${DBZ_TUNED[@]}" || { report_failure "peers: Debezium" "the engine did not start (see $WORK/debezium-1.log)"; stop_real_kafka; return; }
    log "Debezium's engine: task started $(calc "($(dbz_mark task_started_ms) - $DBZ_LAUNCH_MS) / 1000") s after the JVM was launched"
    peers_warm_up debezium
    peers_latency debezium tuned "$PEERS_LAT_S"
    peers_sustained debezium "$DBZ_PID" "$(dbz_walsender_pid)"
    peers_backlog_debezium
    dbz_stop
    if [ "$(field "${BL_debezium:-}" done)" != yes ]; then
        # What is left of the backlog would be read before anything new: skip it (the slot
        # moves to the current end of the WAL, the engine's offsets go) and count afresh.
        sql "SELECT pg_replication_slot_advance('$DBZ_SLOT', pg_current_wal_lsn())" >/dev/null
        rm -f "$WORK/debezium.offsets"
        EXPECT_debezium=$(topic_sum "$PEERS_TOPIC_DBZ")
        log "skipped the rest of Debezium's backlog: the slot advanced to the end of the WAL"
    fi
    # Debezium with its defaults (poll.interval.ms 500), for the latency only.
    if dbz_start; then
        peers_warm_up debezium
        peers_latency debezium default "$PEERS_LAT_S"
    fi
    dbz_stop
    # The slot goes: from here on nothing decodes the WAL (wal_level stays logical).
    sql "SELECT pg_drop_replication_slot('$DBZ_SLOT')" >/dev/null

    # The floor of the latency lines: what the brokers and the consumer take by themselves.
    peers_latency direct warmup "$PEERS_WARM_S"
    peers_latency direct floor "$PEERS_LAT_S"
    # The floor of the throughput lines: what the cluster takes from a producer that reads no
    # database (test/bench/produce: librdkafka, idempotent, acks=all, the relay's settings).
    PEERS_PRODUCE=$("$BIN/produce" --bootstrap "$RK_BOOTSTRAP" --topic "$PEERS_TOPIC_DIRECT" --count "$PEERS_BACKLOG_N") ||
        PEERS_PRODUCE="failed $PEERS_PRODUCE"
    log "direct produce of $(short "$PEERS_BACKLOG_N"): $PEERS_PRODUCE"

    echo "   -- outbox: latency, sustained, backlog"
    peers_warm_up outbox
    peers_latency outbox run "$PEERS_LAT_S"
    # shellcheck disable=SC2046
    peers_sustained outbox $(outbox_relay_pids)
    peers_backlog_outbox
    sql "SELECT outbox.pause('peers')" >/dev/null

    peers_report
    stop_real_kafka
}

peers_report() {
    local q lo lt ld r note m
    for q in p50 p99 max; do
        lo=$(field "$LAT_outbox_run" "${q}_ms") lt=$(field "$LAT_debezium_tuned" "${q}_ms")
        ld=$(field "${LAT_debezium_default:-}" "${q}_ms")
        r=$(ratio "$lo" "$lt")
        local target="" verdict=""
        if [ "$q" = p99 ]; then target="ratio <= 0.10" verdict=$(check "$r" "<=" 0.10); fi
        note="Debezium with poll.interval.ms=1; with its default (500 ms): ${ld:-?} ms; direct produce to the same brokers (Java, acks=all), same consumer: $(field "${LAT_direct_floor:-}" "${q}_ms") ms"
        if [ "$q" = p50 ]; then
            note="$note; committed/s outbox $(field "$LAT_outbox_run" rate), Debezium $(field "$LAT_debezium_tuned" rate) (paced at 1,000)"
            for m in outbox_run debezium_tuned; do
                local l="LAT_$m"
                [ "$(field "${!l}" missing)" = 0 ] || note="$note; ${m%_*}: $(field "${!l}" missing) MISSING"
            done
        fi
        report_peer "latency $q @ 1k msg/s" "$lo" "$lt" ms "$r" "$target" "$verdict" "$note"
    done

    r=$(ratio "$(field "$TP_outbox" delivered_rate)" "$(field "$TP_debezium" delivered_rate)")
    # A relay kept up when less than a second's worth of messages was left as the producers stopped.
    local kept="" sys
    for sys in outbox debezium; do
        local tp="TP_$sys"
        if [ "$(field "${!tp}" backlog)" -le "$(field "${!tp}" delivered_rate)" ] 2>/dev/null; then
            kept="$kept${kept:+, }$sys kept up (the producers were the limit)"
        fi
    done
    report_peer "sustained, 16 producers ${PEERS_TPUT_S}s" "$(field "$TP_outbox" delivered_rate)" "$(field "$TP_debezium" delivered_rate)" msg/s \
        "$r" "ratio >= 5" "$(check "$r" ">=" 5)" \
        "delivered/s while the producers ran; they committed outbox $(field "$TP_outbox" produced), Debezium $(field "$TP_debezium" produced); all delivered $(field "$TP_outbox" catch_up_s | tr _ ' ') / $(field "$TP_debezium" catch_up_s | tr _ ' ') s after they stopped${kept:+; $kept}; floors, same run: 16 producers on a plain table $(field "$PRODUCER_IDLE" plain) tps (relays idle), direct produce to the same topic layout $(field "${PEERS_PRODUCE:-}" rate) msg/s"
    report_peer "backlog when the producers stop" "$(field "$TP_outbox" backlog)" "$(field "$TP_debezium" backlog)" msgs \
        "$(ratio "$(field "$TP_outbox" backlog)" "$(field "$TP_debezium" backlog)")" "" "" \
        "committed, not yet in Kafka; Debezium's slot lag $(field "$TP_debezium" lag_bytes) bytes (pg_current_wal_lsn() - confirmed_flush_lsn; offsets flushed every 1 s); outbox.messages rows left $(field "$TP_outbox" pending)"
    r=$(ratio "$(field "$TP_outbox" tps)" "$(field "$TP_debezium" tps)")
    report_peer "producer tps, 16 clients, relay delivering" "$(field "$TP_outbox" tps)" "$(field "$TP_debezium" tps)" tps \
        "$r" "ratio >= 0.87" "$(check "$r" ">=" 0.87)" "the sustained run's producers, sharing the cores with the relay (and with Debezium's decoding)"
    r=$(ratio "$(field "$PRODUCER_IDLE" outbox)" "$(field "$PRODUCER_IDLE" debezium)")
    report_peer "producer tps, 16 clients, relay idle" "$(field "$PRODUCER_IDLE" outbox)" "$(field "$PRODUCER_IDLE" debezium)" tps "$r" \
        "ratio >= 0.87" "$(check "$r" ">=" 0.87)" "$PRODUCER_IDLE_NOTE"

    if [[ "${BL_outbox:-failed}" == seconds=* ]] && [[ "${BL_debezium:-failed}" == seconds=* ]]; then
        local no nd so sd ro rd partial=""
        no=$(field "$BL_outbox" delivered) nd=$(field "$BL_debezium" delivered)
        so=$(field "$BL_outbox" seconds) sd=$(field "$BL_debezium" seconds)
        ro=$(int "$(calc "$no / $so")") rd=$(int "$(calc "$nd / $sd")")
        [ "$(field "$BL_outbox" done)" = yes ] || partial="$partial; outbox DID NOT FINISH in ${PEERS_DRAIN_TIMEOUT_S} s: $no delivered"
        [ "$(field "$BL_debezium" done)" = yes ] || partial="$partial; Debezium did not finish in ${PEERS_DRAIN_TIMEOUT_S} s (the cap): rate over the $nd it delivered"
        r=$(ratio "$ro" "$rd")
        report_peer "drain $(short "$PEERS_BACKLOG_N") backlog" "$ro" "$rd" msg/s "$r" "ratio >= 5" "$(check "$r" ">=" 5)" \
            "outbox $so s from resume; Debezium $sd s from its task start (the JVM took $(field "$BL_debezium" startup_s) s to get there, its first record $(field "$BL_debezium" first_record_s) s later); floor, same run: direct produce of $(short "$PEERS_BACKLOG_N") to the same cluster (librdkafka, idempotent, acks=all, no database) $(field "${PEERS_PRODUCE:-}" rate) msg/s: outbox $(ratio "$ro" "$(field "${PEERS_PRODUCE:-}" rate)"), Debezium $(ratio "$rd" "$(field "${PEERS_PRODUCE:-}" rate)") of it$partial"
        local co cd
        co=$(calc "$(field "$BL_outbox" cpu) * 1000000 / $no") cd=$(calc "$(field "$BL_debezium" cpu) * 1000000 / $nd")
        report_peer "relay CPU per 1M messages" "$co" "$cd" s "$(ratio "$co" "$cd")" "ratio <= 0.20" \
            "$(check "$(ratio "$co" "$cd")" "<=" 0.20)" \
            "in the drain; outbox: worker$( [ "$(field "$BL_outbox" pids | tr -cd , | wc -c)" -gt 0 ] && echo " + outbox-driver") $(field "$BL_outbox" cpu) s; Debezium: JVM $(field "$BL_debezium" jvm_cpu) s + walsender (logical decoding) $(field "$BL_debezium" walsender_cpu) s, and $(field "$BL_debezium" startup_cpu) s to start the JVM; in the sustained run: outbox $(field "$TP_outbox" cpu_per_1M) s, Debezium $(field "$TP_debezium" cpu_per_1M) s per 1M"
        report_peer "relay peak RSS" "$(field "$BL_outbox" rss_mb)" "$(field "$BL_debezium" rss_mb)" MB \
            "$(ratio "$(field "$BL_outbox" rss_mb)" "$(field "$BL_debezium" rss_mb)")" "" "" \
            "private memory (RssAnon + RssFile, not shared_buffers) in the drain; Debezium: JVM (-Xmx1g) $(field "$BL_debezium" jvm_rss_mb) MB + walsender $(field "$BL_debezium" walsender_rss_mb) MB"
        local wo wd n=$PEERS_BACKLOG_N
        wo=$(int "$(calc "($(field "$BL_outbox" produce_wal) + $(field "$BL_outbox" relay_wal)) / $n")")
        wd=$(int "$(calc "($(field "$BL_debezium" produce_wal) + $(field "$BL_debezium" relay_wal) + $(field "$BL_debezium" delete_wal)) / $n")")
        per() { int "$(calc "$1 / $n")"; }
        report_peer "WAL bytes per message" "$wo" "$wd" B "$(ratio "$wo" "$wd")" "ratio <= 1.50" \
            "$(check "$(ratio "$wo" "$wd")" "<=" 1.50)" \
            "the backlog (50k rows/tx), from the insert to the rows' removal, a checkpoint before the drain: outbox $(per "$(field "$BL_outbox" produce_wal)") to insert + $(per "$(field "$BL_outbox" relay_wal)") by the relay (its lock and delete, full-page images $(per "$(field "$BL_outbox" relay_fpi)") of it); Debezium $(per "$(field "$BL_debezium" produce_wal)") to insert + $(per "$(field "$BL_debezium" relay_wal)") while it drains + $(per "$(field "$BL_debezium" delete_wal)") to delete the rows (full-page images $(per "$(field "$BL_debezium" delete_fpi)")); without the full-page images: $(ratio "$(calc "$wo - $(per "$(field "$BL_outbox" relay_fpi)")")" "$(calc "$wd - $(per "$(field "$BL_debezium" delete_fpi)")")"); 1 row/tx (the sustained run, all told, Debezium's rows not deleted): outbox $(field "$TP_outbox" wal_per_msg), Debezium $(field "$TP_debezium" wal_per_msg)"
    else
        report_failure "peers: drain $(short "$PEERS_BACKLOG_N") backlog" "outbox: ${BL_outbox:-?}; Debezium: ${BL_debezium:-?}"
    fi
    echo
    peers_markdown
}
