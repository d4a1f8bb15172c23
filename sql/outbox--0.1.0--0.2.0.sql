-- outbox 0.1.0 -> 0.2.0. A fresh 0.2.0 install (sql/outbox--0.2.0.sql) and a 0.1.0 install
-- updated by this script have the same schema (test/t/086_upgrade.pl compares them).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.2.0'" to load this file. \quit

--------------------------------------------------------------------------------------------------
-- Per-key ordering on SQL and row locks: a row per key in outbox.ordered_keys replaces the walk
-- over messages_key_order's leaf pages, its in-memory floors and the shared generation counter.
--------------------------------------------------------------------------------------------------
-- Per-key ordering: one row per (destination, order key) that has or recently had queued
-- messages. Producers of a key take turns on its row's lock (the insert check upserts it before
-- it numbers the message, and holds it until commit), so ids follow commit order within a key.
-- The worker reads these rows to find the keys whose head is due and where each key's messages
-- begin; it claims messages of a key only while its transaction holds the key's row FOR KEY
-- SHARE (which producers' turns do not conflict with), and never waits for a lock. The rules
-- every writer keeps (src/pg/key_order.cpp, src/pg/queue.cpp):
--   floor   no queued message of the key has a lower id; lowered (with floor_version + 1) only
--           by a transaction that puts a message back with its old id (requeue, restore,
--           ordering turned on), which takes the row FOR UPDATE before it writes it (so it
--           waits for the workers holding the key, and they skip the key until it ends); raised
--           by the worker past a head it removed, only while floor_version is the one it read
--           when it found that head.
--   due_at  the key's head cannot be claimed before this ('infinity': no queued message);
--           producers lower it, the worker sets it from what it saw of the head, only while
--           version (bumped by every write) is the one it read.
-- Not kept by pg_dump: the insert check rebuilds it as the queue is restored.
CREATE TABLE outbox.ordered_keys (
    destination   text NOT NULL,
    order_key     bigint NOT NULL,
    key           text NOT NULL,     -- a key of this order (keys whose hashes collide share one)
    floor         bigint NOT NULL,
    due_at        timestamptz NOT NULL,
    floor_version bigint NOT NULL DEFAULT 0,
    version       bigint NOT NULL DEFAULT 0,
    idle_since    timestamptz,       -- when due_at became 'infinity'; swept after a while
    PRIMARY KEY (destination, order_key)
);
COMMENT ON TABLE outbox.ordered_keys IS
    'per-key ordering: the keys of ordering = key destinations, where their queued messages begin and when their head is due; kept by outbox';
CREATE INDEX ordered_keys_due ON outbox.ordered_keys (destination, due_at, order_key);
-- Written once per key per worker transaction, mostly without changing an indexed column: room
-- on each page for those updates to stay there (HOT, pruned in place), and autovacuum soon.
ALTER TABLE outbox.ordered_keys SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
-- The keys of the ordered messages queued now, each from its first message.
INSERT INTO outbox.ordered_keys (destination, order_key, key, floor, due_at)
SELECT m.destination, m.order_key, min(m.key), min(m.id), now()
  FROM outbox.messages AS m
 WHERE m.order_key IS NOT NULL
 GROUP BY m.destination, m.order_key;

DROP FUNCTION outbox._key_heads(text, bigint, bigint, integer, boolean);
DROP FUNCTION outbox._requeueing();
DROP FUNCTION outbox._reordering_keys();
-- The head of each key of a destination (its first queued message), found as a claim finds it:
-- one descent of messages_key_order per key, from the key's floor. Keys without queued
-- messages ('infinity') are not looked at.
CREATE FUNCTION outbox._key_heads(destination text)
RETURNS TABLE (order_key bigint, id bigint, tid tid) LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT k.order_key, h.id, h.ctid
      FROM outbox.ordered_keys AS k
     CROSS JOIN LATERAL (
           SELECT m.id, m.ctid FROM outbox.messages AS m
            WHERE m.order_key = k.order_key AND m.id >= k.floor AND m.destination = k.destination
            ORDER BY m.id LIMIT 1) AS h
     WHERE k.destination = _key_heads.destination AND k.due_at < 'infinity'
$$;

CREATE OR REPLACE FUNCTION outbox.alter_destination(name text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- The calling statement carries the config and its secrets: an error raised in here must not
-- log it (log_min_error_statement is back to its setting when the transaction aborts).
SET log_min_error_statement = panic AS $$
DECLARE
    new_config jsonb;
BEGIN
    IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
        RAISE EXCEPTION 'outbox.alter_destination needs a JSON object of settings to change'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Settings given are replaced, settings given as null are removed, others are kept.';
    END IF;
    UPDATE outbox.destinations AS d
       SET config = jsonb_strip_nulls(d.config || alter_destination.config), updated_at = now()
     WHERE d.name = alter_destination.name
    RETURNING d.config INTO new_config;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', alter_destination.name
            USING ERRCODE = 'undefined_object';
    END IF;
    -- Queued messages follow the new ordering: without it they all go at once; with it the
    -- messages of a key go in id order from now on.
    IF new_config->>'ordering' IS DISTINCT FROM 'key' THEN
        UPDATE outbox.messages AS m SET order_key = NULL
         WHERE m.destination = alter_destination.name AND m.order_key IS NOT NULL;
        DELETE FROM outbox.ordered_keys AS k WHERE k.destination = alter_destination.name;
    ELSE
        -- A message given its order key now may lie below its key's floor: the floor goes down
        -- with floor_version + 1, the key's row taken FOR UPDATE first (see
        -- outbox.ordered_keys), as a requeue does. (Rows exist only if ordering was on.)
        PERFORM FROM outbox.ordered_keys AS k
         WHERE k.destination = alter_destination.name
           AND k.order_key IN (SELECT outbox._order_key(m.destination, m.key)
                                 FROM outbox.messages AS m
                                WHERE m.destination = alter_destination.name
                                  AND m.key IS NOT NULL AND m.order_key IS NULL)
           FOR UPDATE OF k;
        WITH ordered AS (
            UPDATE outbox.messages AS m SET order_key = outbox._order_key(m.destination, m.key)
             WHERE m.destination = alter_destination.name AND m.key IS NOT NULL
               AND m.order_key IS NULL
            RETURNING m.order_key, m.key, m.id)
        INSERT INTO outbox.ordered_keys AS k (destination, order_key, key, floor, due_at)
        SELECT alter_destination.name, o.order_key, min(o.key), min(o.id), now()
          FROM ordered AS o GROUP BY o.order_key
        ON CONFLICT (destination, order_key) DO UPDATE
           SET floor = least(k.floor, excluded.floor), floor_version = k.floor_version + 1,
               due_at = least(k.due_at, excluded.due_at), version = k.version + 1;
        -- on_dead may have changed: keys held back are looked at again now.
        UPDATE outbox.ordered_keys AS k SET due_at = now(), version = k.version + 1
         WHERE k.destination = alter_destination.name AND k.due_at > now()
           AND k.due_at < 'infinity';
    END IF;
    -- Keys a dead letter held may go on (on_dead = skip), or messages changed queues.
    PERFORM outbox.wake();
END
$$;
COMMENT ON FUNCTION outbox.alter_destination(text, jsonb) IS
    'change settings of a destination: given keys replace, null removes, the rest is kept';

CREATE OR REPLACE FUNCTION outbox.drop_destination(name text, force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pending bigint;
BEGIN
    -- Wait for producers in flight and hold new ones until commit, so no message for this
    -- destination can appear after it was counted.
    LOCK TABLE outbox.messages IN SHARE MODE;
    PERFORM FROM outbox.destinations AS d WHERE d.name = drop_destination.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', drop_destination.name
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT count(*) INTO pending FROM outbox.messages AS m WHERE m.destination = drop_destination.name;
    IF pending > 0 AND NOT coalesce(force, false) THEN
        RAISE EXCEPTION 'destination "%" has % undelivered messages', drop_destination.name, pending
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Wait for them to be delivered, or pass force => true to move them to outbox.dead_letters.';
    END IF;
    IF pending > 0 THEN
        WITH moved AS (
            DELETE FROM outbox.messages AS m WHERE m.destination = drop_destination.name RETURNING m.*
        )
        INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload,
                                         payload_bytes, headers, expires_at, created_at, attempts,
                                         reason, last_error, first_failed_at)
        SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, expires_at,
               created_at, attempts, 'dropped', 'destination dropped with force => true',
               first_failed_at
          FROM moved;
        RAISE NOTICE '% undelivered messages of destination "%" moved to outbox.dead_letters',
            pending, drop_destination.name;
    END IF;
    DELETE FROM outbox.ordered_keys AS k WHERE k.destination = drop_destination.name;
    DELETE FROM outbox.destinations AS d WHERE d.name = drop_destination.name;
END
$$;
COMMENT ON FUNCTION outbox.drop_destination(text, boolean) IS
    'remove a destination; refused while it has undelivered messages unless force => true';

CREATE OR REPLACE FUNCTION outbox.requeue(ids bigint[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    moved_count bigint;
    missing text;
    deadlocks int := 0;
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'outbox.requeue needs an array of dead letter ids'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT dl.destination INTO missing FROM outbox.dead_letters AS dl
     WHERE dl.id = ANY (ids)
       AND NOT EXISTS (SELECT FROM outbox.destinations AS d WHERE d.name = dl.destination)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox destination "%" does not exist', missing
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Create it with outbox.create_destination(), or check the name against outbox.destinations.';
    END IF;
    -- The rows keep their id: only the owner of outbox.messages (this function's) may insert
    -- rows that carry one (src/pg/producer.cpp).
    --
    -- An ordered key's row is taken FOR UPDATE, key after key, and a worker's FOR KEY SHARE
    -- SKIP LOCKED can wait on it all the same: PostgreSQL locks the newer versions of a row a
    -- producer has just updated without SKIP LOCKED. A worker that holds another key of this
    -- call then closes a deadlock; PostgreSQL aborts this call's side (the worker waits longer
    -- before it looks for deadlocks), and the call starts again from where this block began,
    -- after a pause that lets the worker take the key and finish its batch (about 0.3 s).
    LOOP
        BEGIN
            WITH moved AS (
                DELETE FROM outbox.dead_letters AS dl WHERE dl.id = ANY (ids) RETURNING dl.*
            )
            INSERT INTO outbox.messages (id, event_id, destination, topic, key, payload,
                                         payload_bytes, headers, created_at)
            SELECT moved.id, moved.event_id, moved.destination, moved.topic, moved.key,
                   moved.payload, moved.payload_bytes, moved.headers, moved.created_at
              FROM moved ORDER BY moved.id;
            GET DIAGNOSTICS moved_count = ROW_COUNT;
            RETURN moved_count;
        EXCEPTION WHEN deadlock_detected THEN
            deadlocks := deadlocks + 1;
            IF deadlocks >= 5 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05 * deadlocks);
        END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox.requeue(bigint[]) IS
    'move the given dead letters back to the queue; returns how many were moved';

-- Dead letters are never removed automatically; this removes old ones on request.
CREATE OR REPLACE FUNCTION outbox.purge_dead_letters(older_than interval, destination text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    purged bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'outbox.purge_dead_letters needs an age of zero or more'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'For example: SELECT outbox.purge_dead_letters(interval ''30 days'');';
    END IF;
    -- A purged dead letter no longer holds its key (ordering = key, on_dead = block): the key's
    -- head is looked at again now.
    WITH gone AS (
        DELETE FROM outbox.dead_letters AS dl
         WHERE dl.failed_at < now() - older_than
           AND (purge_dead_letters.destination IS NULL OR dl.destination = purge_dead_letters.destination)
        RETURNING dl.destination, dl.key
    ), released AS (
        UPDATE outbox.ordered_keys AS k SET due_at = least(k.due_at, now()), version = k.version + 1
          FROM (SELECT DISTINCT g.destination, g.key FROM gone AS g WHERE g.key IS NOT NULL) AS g
         WHERE k.destination = g.destination AND k.order_key = outbox._order_key(g.destination, g.key)
    )
    SELECT count(*) INTO purged FROM gone;
    RETURN purged;
END
$$;
COMMENT ON FUNCTION outbox.purge_dead_letters(interval, text) IS
    'delete dead letters that failed longer ago than older_than (of one destination, or all); returns how many';

CREATE OR REPLACE FUNCTION outbox.skip(id bigint)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    skipped outbox.dead_letters;
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION 'outbox.skip needs the id of a dead letter' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE outbox.dead_letters AS dl SET skipped_at = now()
     WHERE dl.id = skip.id AND dl.skipped_at IS NULL
    RETURNING dl.* INTO skipped;
    IF FOUND THEN
        -- the key's next message may go now
        UPDATE outbox.ordered_keys AS k SET due_at = least(k.due_at, now()), version = k.version + 1
         WHERE k.destination = skipped.destination
           AND k.order_key = outbox._order_key(skipped.destination, skipped.key);
        PERFORM outbox.wake();
    ELSE
        PERFORM FROM outbox.dead_letters AS dl WHERE dl.id = skip.id;
        IF FOUND THEN
            RAISE NOTICE 'dead letter % was already skipped', skip.id;
        ELSE
            RAISE EXCEPTION 'dead letter % does not exist', skip.id
                USING ERRCODE = 'undefined_object',
                      HINT = 'outbox.dead_letters lists them; a requeued message is no longer a dead letter.';
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.skip(bigint) IS
    'let the later messages of a dead letter''s key go on without it (ordering = key, on_dead = block); the dead letter stays';

--------------------------------------------------------------------------------------------------
-- Queue counts: inserts are counted from what each statement inserted.
--------------------------------------------------------------------------------------------------
-- What was actually inserted (not what an ON CONFLICT clause or another trigger left out);
-- ALWAYS: an insert applied as a replica counts too (the worker itself never inserts).
CREATE FUNCTION outbox._messages_inserted() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_messages_inserted' LANGUAGE C;
CREATE TRIGGER messages_inserted AFTER INSERT ON outbox.messages
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._messages_inserted();
ALTER TABLE outbox.messages ENABLE ALWAYS TRIGGER messages_inserted;

--------------------------------------------------------------------------------------------------
-- Claims after a drain: autovacuum comes for the queue soon.
--------------------------------------------------------------------------------------------------
-- A queue: every row is deleted soon after it is inserted. Autovacuum comes for it after 10,000
-- dead rows (not a fraction of the table), at full speed, so that the index entries of delivered
-- messages do not pile up for long (claims start past them meanwhile: src/pg/queue.cpp).
ALTER TABLE outbox.messages SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 100000);

REVOKE ALL ON FUNCTION outbox._key_heads(text), outbox._messages_inserted() FROM PUBLIC;
-- Producers that ran on the 0.1.0 schema with this module were not counted: count again.
SELECT outbox.recount();

-- Destination kinds amqp (RabbitMQ) and nats (NATS JetStream): the kinds are checked by the
-- destinations trigger (the module); stats() reads their "tls_verify" as for webhooks.
COMMENT ON TABLE outbox.destinations IS
    'Kafka clusters, webhook endpoints, RabbitMQ (amqp) and NATS JetStream (nats) servers messages are delivered to; change with outbox.create_destination/alter_destination/drop_destination';
COMMENT ON FUNCTION outbox.create_destination(text, text, jsonb) IS
    'define a kafka, webhook, amqp or nats destination; the config is checked now, every problem reported at once';
-- Back-pressure (max_pending): stats() gains max_pending and refused_total, from the counters'
-- new refused column. A function's columns change only by DROP and CREATE: the GRANTs given on
-- stats() (README: operator roles, the exporter) are read first and given again after.
DO $$
BEGIN
    PERFORM set_config('outbox_upgrade.stats_grants', coalesce((
        SELECT string_agg(format('GRANT EXECUTE ON FUNCTION outbox.stats() TO %s%s',
                                 CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                      ELSE quote_ident(r.rolname) END,
                                 CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END),
                          '; ')
          FROM pg_catalog.pg_proc AS p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
          LEFT JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee
         WHERE p.oid = 'outbox.stats()'::regprocedure AND a.grantee <> p.proowner
           AND a.privilege_type = 'EXECUTE'), ''), true);
END
$$;
DROP FUNCTION outbox.stats();
DROP FUNCTION outbox._destination_counters();
CREATE FUNCTION outbox._destination_counters(
    OUT destination text, OUT delivered bigint, OUT failed bigint, OUT dead bigint,
    OUT expired bigint, OUT deferred bigint, OUT last_success_at timestamptz,
    OUT last_error text, OUT stats_reset timestamptz, OUT refused bigint,
    OUT superseded bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_destination_counters' LANGUAGE C;
CREATE FUNCTION outbox.stats()
RETURNS TABLE (destination text, kind text, paused boolean, pending bigint, in_flight bigint,
               retrying bigint, dead bigint, oldest_pending_age interval, delivered_total bigint,
               failed_total bigint, last_error text, last_success_at timestamptz,
               scheduled bigint, dead_lettered_total bigint, expired_total bigint,
               deferred_total bigint, stats_reset timestamptz, blocked_keys bigint,
               waiting bigint, tls_verify boolean, queue_dead_tuples bigint,
               queue_last_autovacuum timestamptz, max_pending bigint, refused_total bigint,
               superseded_total bigint)
-- enable_seqscan off: right after a bulk load, before ANALYZE, the planner believes the queue is
-- empty and would scan all of it; every part of this query has an index to use. jit off: the
-- estimates can pass jit_above_cost, and compiling takes far longer than running (~1 ms).
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET jit = off AS $$
    WITH counts AS (SELECT * FROM outbox._queue_counts())
    SELECT d.name, d.kind, d.paused,
           greatest(coalesce(q.queued, 0) - coalesce(blocked.waiting + keyed.behind_scheduled, 0)
                    - ahead.in_flight - ahead.retrying - ahead.scheduled
                    - coalesce(keyed.in_flight, 0) - coalesce(keyed.retrying, 0)
                    - coalesce(keyed.scheduled, 0), 0),
           ahead.in_flight + coalesce(keyed.in_flight, 0),
           ahead.retrying + coalesce(keyed.retrying, 0), dead.n,
           now() - least(head.created_at, ahead.oldest, keyed.oldest),
           coalesce(c.delivered, 0), coalesce(c.failed, 0), c.last_error, c.last_success_at,
           ahead.scheduled + coalesce(keyed.scheduled, 0), coalesce(c.dead, 0),
           coalesce(c.expired, 0), coalesce(c.deferred, 0), c.stats_reset,
           blocked.keys, coalesce(blocked.waiting + keyed.behind_scheduled, 0),
           -- false only where TLS certificate verification was switched off explicitly
           CASE WHEN d.kind IN ('webhook', 'amqp', 'nats')
                THEN coalesce((d.config->>'tls_verify')::boolean, true)
                ELSE coalesce((d.config->>'enable.ssl.certificate.verification')::boolean, true) END,
           t.n_dead_tup, t.last_autovacuum,
           (d.config->>'max_pending')::bigint, coalesce(c.refused, 0),
           coalesce(c.superseded, 0)
      FROM outbox.destinations AS d
      LEFT JOIN counts AS q ON q.destination = d.name
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.lease_token IS NOT NULL) AS in_flight,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts > 0) AS retrying,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts = 0) AS scheduled,
                 min(m.created_at) AS oldest
            FROM outbox.messages AS m
           WHERE m.destination = d.name AND m.order_key IS NULL
             AND m.available_at > now()) AS ahead
      LEFT JOIN LATERAL (
          SELECT m.created_at FROM outbox.messages AS m
           WHERE m.destination = d.name AND m.order_key IS NULL
           ORDER BY m.available_at, m.id LIMIT 1) AS head ON true
      -- ordering = key: the head of each key (the messages behind a head are pending or
      -- waiting, never in flight)
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.lease_token IS NOT NULL AND m.available_at > now())
                     AS in_flight,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts > 0
                                    AND m.available_at > now()) AS retrying,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts = 0
                                    AND m.available_at > now()) AS scheduled,
                 min(m.created_at) AS oldest,
                 coalesce(sum(behind.n), 0) AS behind_scheduled
            FROM outbox._key_heads(CASE WHEN coalesce(q.queued, 0) > 0 THEN d.name END) AS h
            JOIN outbox.messages AS m ON m.ctid = h.tid
            LEFT JOIN LATERAL (
                SELECT count(*) AS n FROM outbox.messages AS w
                 WHERE m.lease_token IS NULL AND m.attempts = 0 AND m.available_at > now()
                   AND w.order_key = m.order_key AND w.id > m.id) AS behind ON true) AS keyed
        ON d.config->>'ordering' = 'key'
      LEFT JOIN LATERAL (
          SELECT count(*) AS keys, coalesce(sum(b.waiting), 0) AS waiting
            FROM outbox.blocked_keys(CASE WHEN coalesce(q.queued, 0) > 0 THEN d.name END) AS b)
          AS blocked
        ON d.config->>'ordering' = 'key'
      CROSS JOIN LATERAL (
          SELECT count(*) AS n FROM outbox.dead_letters AS dl WHERE dl.destination = d.name) AS dead
      LEFT JOIN outbox._destination_counters() AS c ON c.destination = d.name
      LEFT JOIN pg_stat_all_tables AS t ON t.relid = 'outbox.messages'::regclass
     ORDER BY d.name
$$;

-- outbox.workers() gains driver_pid and driver_restarts: each worker's driver process
-- (outbox-driver). A function's result columns cannot change in place, so it is dropped and
-- created again, and the EXECUTE privileges roles held on it are granted back.
DO $upgrade$
DECLARE
    grants text[];
    stmt text;
BEGIN
    SELECT coalesce(array_agg(format('GRANT EXECUTE ON FUNCTION outbox.workers() TO %s%s',
                                     CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                          ELSE quote_ident(r.rolname) END,
                                     CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                                          ELSE '' END)), '{}')
      INTO grants
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
     WHERE p.oid = 'outbox.workers()'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;

    DROP FUNCTION outbox.workers();
    CREATE FUNCTION outbox.workers(
        OUT pid integer, OUT database text, OUT worker integer, OUT state text,
        OUT destination text, OUT in_flight bigint, OUT started_at timestamptz,
        OUT last_cycle_at timestamptz, OUT cycles bigint, OUT claimed bigint, OUT delivered bigint,
        OUT retried bigint, OUT deferred bigint, OUT dead bigint, OUT expired bigint,
        OUT driver_pid integer, OUT driver_restarts bigint)
    RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_workers' LANGUAGE C;
    COMMENT ON FUNCTION outbox.workers() IS
        'the delivery workers of every served database, live from shared memory: state, current destination, counters, driver process';
    REVOKE ALL ON FUNCTION outbox.workers() FROM PUBLIC;
    FOREACH stmt IN ARRAY grants LOOP
        EXECUTE stmt;
    END LOOP;
END
$upgrade$;

-- Whether a superuser wrote a destination's config as it stands (set by the check trigger):
-- only then may a webhook's error texts quote response bodies. Destinations defined before
-- 0.2.0 were written by someone unknown: false.
ALTER TABLE outbox.destinations ADD COLUMN created_by_superuser boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN outbox.destinations.created_by_superuser IS
    'a superuser wrote the config as it stands: webhook errors may quote response bodies';

CREATE OR REPLACE FUNCTION outbox.create_destination(name text, kind text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- The calling statement carries the config and its secrets: an error raised in here must not
-- log it (log_min_error_statement is back to its setting when the transaction aborts).
SET log_min_error_statement = panic AS $$
BEGIN
    -- created_by_superuser: asked for here, granted by the check trigger only to a superuser.
    INSERT INTO outbox.destinations (name, kind, config, created_by_superuser)
    VALUES (create_destination.name, create_destination.kind, create_destination.config, true)
    ON CONFLICT ON CONSTRAINT destinations_pkey DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" already exists', create_destination.name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with outbox.alter_destination(), or drop it first.';
    END IF;
END
$$;

COMMENT ON FUNCTION outbox.stats() IS
    'one row per destination: queue gauges kept exact at commit, counters since server start';
REVOKE ALL ON FUNCTION outbox.stats(), outbox._destination_counters() FROM PUBLIC;
DO $$
BEGIN
    IF current_setting('outbox_upgrade.stats_grants') <> '' THEN
        EXECUTE current_setting('outbox_upgrade.stats_grants');
    END IF;
END
$$;

--------------------------------------------------------------------------------------------------
-- The inbox (consuming side, issue 23): each event applied once. (This block is the inbox's
-- alone; sql/outbox--0.2.0.sql and sql/outbox--0.1.0--0.2.0.sql carry the same text.)
--------------------------------------------------------------------------------------------------
-- Dedup rows: one per event a subscription applied, or a caller of outbox.inbox_accept()
-- accepted (subscription is then the caller's source name). topic, partition and offset say
-- where the worker read the event (NULL for inbox_accept). Rows older than
-- outbox.inbox_retention are swept by the workers in bounded batches.
CREATE TABLE outbox.inbox (
    subscription text NOT NULL,
    event_id     uuid NOT NULL,
    topic        text,
    "partition"  integer,
    "offset"     bigint,
    received_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_pkey PRIMARY KEY (subscription, event_id)
);
COMMENT ON TABLE outbox.inbox IS
    'inbox dedup rows: the events each subscription (or inbox_accept source) has applied, swept after outbox.inbox_retention';
CREATE INDEX inbox_received_at ON outbox.inbox (received_at);
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');

-- For consumers other than the worker: in the caller's transaction, true the first time an
-- event id is accepted for a source, false after (the dedup row commits or rolls back with the
-- caller's effects). A concurrent caller with the same id waits for the first to finish.
CREATE FUNCTION outbox.inbox_accept(source text, event_id uuid)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF source IS NULL OR source !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid inbox source %', coalesce(quote_literal(left(source, 64)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A source name is 1 to 63 characters of letters, digits, ''_'', ''.'' and ''-'', starting with a letter or digit.',
                  HINT = 'Name the consumer whose events these are, for example ''billing''.';
    END IF;
    IF event_id IS NULL THEN
        RAISE EXCEPTION 'outbox.inbox_accept needs an event id'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass the event''s stable id: the ce_id header or webhook-id of an outbox message is its event_id.';
    END IF;
    -- A subscription's dedup rows are its worker's: a row added here would make it skip an event.
    PERFORM FROM outbox.inbox_subscriptions AS s WHERE s.name = inbox_accept.source;
    IF FOUND THEN
        RAISE EXCEPTION 'inbox source "%" is a subscription', source
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The workers record the events a subscription applies; an event accepted here would be skipped by it.',
                  HINT = 'Name the source after your consumer, not after a subscription.';
    END IF;
    INSERT INTO outbox.inbox AS i (subscription, event_id)
    VALUES (inbox_accept.source, inbox_accept.event_id)
    ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION outbox.inbox_accept(text, uuid) IS
    'true the first time an event id is accepted for a source, in the caller''s transaction; false for a duplicate';
REVOKE ALL ON FUNCTION outbox.inbox_accept(text, uuid) FROM PUBLIC;

-- What a subscription's handler is called with, once per record: handler(m outbox.inbox_message)
-- RETURNS void.
CREATE TYPE outbox.inbox_message AS (
    subscription  text,
    topic         text,
    "partition"   integer,
    "offset"      bigint,
    key           text,
    headers       jsonb,
    payload       jsonb,
    payload_bytes bytea,
    event_id      uuid,
    "timestamp"   timestamptz
);
COMMENT ON TYPE outbox.inbox_message IS
    'one consumed record, as a subscription''s handler receives it';

-- Subscriptions: where the workers consume from, and the handler each record goes to. Configs
-- may hold secrets: readable only by the table's owner; operators use outbox.subscriptions().
-- handler is kept as its signature text (schema-qualified), looked up when the workers load
-- the subscription: a regprocedure column would stop pg_upgrade. The handler runs as owner.
CREATE TABLE outbox.inbox_subscriptions (
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    config      jsonb NOT NULL,
    handler     text NOT NULL,
    owner       regrole,
    paused      boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Why the workers cannot consume it now (a bad handler, an unknown topic, the cluster
    -- unreachable), written by them; NULL when they can.
    last_error  text
);
COMMENT ON TABLE outbox.inbox_subscriptions IS
    'Kafka topics the workers consume into PostgreSQL through a handler; change with outbox.create_subscription/alter_subscription/drop_subscription';
-- Every row is validated on its way in (name, kind, config with librdkafka itself, the
-- handler's signature and the owner's right to run it), and only the owner (or a superuser)
-- may change or drop it; see src/pg/subscriptions.cpp.
CREATE FUNCTION outbox._subscriptions_check() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_subscriptions_check' LANGUAGE C;
CREATE TRIGGER subscriptions_check BEFORE INSERT OR UPDATE OF name, kind, config, handler, owner OR DELETE
    ON outbox.inbox_subscriptions FOR EACH ROW EXECUTE FUNCTION outbox._subscriptions_check();
ALTER TABLE outbox.inbox_subscriptions ENABLE ALWAYS TRIGGER subscriptions_check;

-- Where each subscription stands in each partition, committed in the same transaction as the
-- dedup rows and the handlers' effects (Kafka's group offsets are not used): "offset" is the
-- next record to apply. The counters are kept with it, so they are exact across crashes.
CREATE TABLE outbox.inbox_offsets (
    subscription   text NOT NULL REFERENCES outbox.inbox_subscriptions (name) ON DELETE CASCADE,
    topic          text NOT NULL,
    "partition"    integer NOT NULL,
    "offset"       bigint NOT NULL,
    high_watermark bigint,
    consumed       bigint NOT NULL DEFAULT 0,
    duplicates     bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    last_error     text,
    last_record_at timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_offsets_pkey PRIMARY KEY (subscription, topic, "partition")
);
COMMENT ON TABLE outbox.inbox_offsets IS
    'per subscription and partition: the next offset to apply and the counts, committed with the handlers'' effects';
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_offsets', '');

CREATE FUNCTION outbox.create_subscription(name text, kind text, config jsonb, handler regprocedure)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- The calling statement carries the config and its secrets: an error raised in here must not
-- log it (log_min_error_statement is back to its setting when the transaction aborts).
SET log_min_error_statement = panic AS $$
BEGIN
    IF handler IS NULL THEN
        RAISE EXCEPTION 'subscription "%" needs a handler', create_subscription.name
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass a function f(m outbox.inbox_message) RETURNS void, for example ''myschema.apply_order(outbox.inbox_message)''::regprocedure.';
    END IF;
    -- The owner is the calling role, set by the check trigger.
    INSERT INTO outbox.inbox_subscriptions (name, kind, config, handler)
    VALUES (create_subscription.name, create_subscription.kind, create_subscription.config,
            create_subscription.handler::oid::regprocedure::text)
    ON CONFLICT ON CONSTRAINT inbox_subscriptions_pkey DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" already exists', create_subscription.name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with outbox.alter_subscription(), or drop it first.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure) IS
    'consume Kafka topics into PostgreSQL: each record applied once through the handler, run as the calling role';

CREATE FUNCTION outbox.alter_subscription(name text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET log_min_error_statement = panic AS $$
BEGIN
    IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
        RAISE EXCEPTION 'outbox.alter_subscription needs a JSON object of settings to change'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Settings given are replaced, settings given as null are removed, others are kept.';
    END IF;
    UPDATE outbox.inbox_subscriptions AS s
       SET config = jsonb_strip_nulls(s.config || alter_subscription.config), updated_at = now()
     WHERE s.name = alter_subscription.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" does not exist', alter_subscription.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.alter_subscription(text, jsonb) IS
    'change settings of a subscription: given keys replace, null removes, the rest is kept';

-- Its offsets go with it; its dedup rows stay (until outbox.inbox_retention), so a subscription
-- created again under the same name applies none of the events already applied.
CREATE FUNCTION outbox.drop_subscription(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM outbox.inbox_subscriptions AS s WHERE s.name = drop_subscription.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" does not exist', drop_subscription.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.drop_subscription(text) IS
    'remove a subscription and its offsets; its dedup rows stay until outbox.inbox_retention';

-- Records whose handler raised (issue 23): with "on_error": "skip" consumption goes on past
-- them; with "block" their partition stops at them (blocking = true) while the row exists.
-- outbox.requeue_inbox() asks the worker that consumes the partition to apply one again: it
-- runs the handler once more (the dedup row guards it), and the row goes when it succeeds; a
-- blocked partition goes on once its blocking row is gone (requeued and applied, or deleted
-- by the operator to skip the record).
CREATE TABLE outbox.inbox_dead_letters (
    id               bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    subscription     text NOT NULL,
    topic            text NOT NULL,
    "partition"      integer NOT NULL,
    "offset"         bigint NOT NULL,
    event_id         uuid NOT NULL,
    key              text,
    headers          jsonb,
    payload          jsonb,
    payload_bytes    bytea,
    record_timestamp timestamptz,
    blocking         boolean NOT NULL DEFAULT false,
    attempts         integer NOT NULL DEFAULT 1,
    last_error       text NOT NULL,
    last_sqlstate    text NOT NULL,
    failed_at        timestamptz NOT NULL DEFAULT now(),
    requeued_at      timestamptz,
    CONSTRAINT inbox_dead_letters_record UNIQUE (subscription, topic, "partition", "offset")
);
COMMENT ON TABLE outbox.inbox_dead_letters IS
    'consumed records whose handler raised: error and SQLSTATE; outbox.requeue_inbox applies one again';
CREATE INDEX inbox_dead_letters_requeued ON outbox.inbox_dead_letters (subscription, requeued_at)
    WHERE requeued_at IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_dead_letters_id_seq', '');

-- Marks dead-lettered records to be applied again by the worker consuming their partition;
-- returns how many were marked. By ids, or every one of a subscription.
CREATE FUNCTION outbox.requeue_inbox(ids bigint[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'outbox.requeue_inbox needs an array of dead letter ids'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'SELECT outbox.requeue_inbox(array_agg(id)) FROM outbox.inbox_dead_letters WHERE ...; or outbox.requeue_inbox(''subscription'').';
    END IF;
    UPDATE outbox.inbox_dead_letters AS d SET requeued_at = now()
     WHERE d.id = ANY (requeue_inbox.ids) AND d.requeued_at IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox.wake();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.requeue_inbox(bigint[]) IS
    'apply dead-lettered inbox records again (their handler runs once more); returns how many were requeued';

CREATE FUNCTION outbox.requeue_inbox(subscription text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM FROM outbox.inbox_subscriptions AS s WHERE s.name = requeue_inbox.subscription;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" does not exist', requeue_inbox.subscription
            USING ERRCODE = 'undefined_object';
    END IF;
    UPDATE outbox.inbox_dead_letters AS d SET requeued_at = now()
     WHERE d.subscription = requeue_inbox.subscription AND d.requeued_at IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox.wake();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.requeue_inbox(text) IS
    'apply every dead-lettered record of a subscription again; returns how many were requeued';

-- Per subscription and partition (one row with no partition before the workers first read
-- it): where it stands, how far behind, and what happened. blocked: "on_error": "block" holds
-- the partition at a dead-lettered record.
CREATE FUNCTION outbox.subscriptions(
    OUT subscription text, OUT kind text, OUT paused boolean, OUT topic text,
    OUT "partition" integer, OUT stored_offset bigint, OUT high_watermark bigint, OUT lag bigint,
    OUT consumed bigint, OUT duplicates bigint, OUT dead_lettered bigint, OUT blocked boolean,
    OUT last_error text, OUT last_record_at timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT s.name, s.kind, s.paused, o.topic, o."partition", o."offset", o.high_watermark,
           greatest(o.high_watermark - o."offset", 0), coalesce(o.consumed, 0),
           coalesce(o.duplicates, 0), coalesce(o.dead_lettered, 0),
           EXISTS (SELECT FROM outbox.inbox_dead_letters AS d
                    WHERE d.subscription = s.name AND d.topic = o.topic
                      AND d."partition" = o."partition" AND d.blocking),
           coalesce(s.last_error, o.last_error), o.last_record_at
      FROM outbox.inbox_subscriptions AS s
      LEFT JOIN outbox.inbox_offsets AS o ON o.subscription = s.name
     ORDER BY s.name, o.topic, o."partition"
$$;
COMMENT ON FUNCTION outbox.subscriptions() IS
    'per subscription and partition: stored offset, high watermark, lag, consumed, duplicates skipped, dead-lettered, blocked, last error, last record time';
REVOKE ALL ON FUNCTION outbox._subscriptions_check(), outbox.create_subscription(text, text, jsonb, regprocedure),
    outbox.alter_subscription(text, jsonb), outbox.drop_subscription(text), outbox.subscriptions(),
    outbox.requeue_inbox(bigint[]), outbox.requeue_inbox(text)
    FROM PUBLIC;
-- pause and resume apply to subscriptions too.
CREATE OR REPLACE FUNCTION outbox.pause(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found_any boolean;
BEGIN
    UPDATE outbox.destinations AS d SET paused = true, updated_at = now() WHERE d.name = pause.name;
    found_any := FOUND;
    -- A subscription of that name too (the inbox): its partitions stop being consumed.
    UPDATE outbox.inbox_subscriptions AS s SET paused = true, updated_at = now() WHERE s.name = pause.name;
    IF NOT (found_any OR FOUND) THEN
        RAISE EXCEPTION 'destination or subscription "%" does not exist', pause.name USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.pause(text) IS 'stop delivering to a destination (messages keep queueing), or consuming for a subscription';

CREATE OR REPLACE FUNCTION outbox.resume(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found_any boolean;
BEGIN
    UPDATE outbox.destinations AS d SET paused = false, updated_at = now() WHERE d.name = resume.name;
    found_any := FOUND;
    UPDATE outbox.inbox_subscriptions AS s SET paused = false, updated_at = now() WHERE s.name = resume.name;
    IF NOT (found_any OR FOUND) THEN
        RAISE EXCEPTION 'destination or subscription "%" does not exist', resume.name USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.resume(text) IS 'resume delivery to a paused destination, or consumption for a paused subscription';
-- (end of the inbox block)

--------------------------------------------------------------------------------------------------
-- Standard Webhooks verification for applications that receive our webhooks (issue 23/25).
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._verify_webhook(secrets text[], id text, "timestamp" text,
                                       signature text, body bytea, tolerance_s float8)
RETURNS boolean AS 'MODULE_PATHNAME', 'outbox_verify_webhook' LANGUAGE C STABLE PARALLEL SAFE;
-- The three headers, found case-insensitively (HTTP header names are); a missing one: false.
-- SECURITY DEFINER: it reads no table, and a receiving application needs EXECUTE on this
-- function alone.
CREATE FUNCTION outbox.verify_webhook(secrets text[], headers jsonb, body bytea,
                                      tolerance interval DEFAULT '5 minutes')
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._verify_webhook(secrets,
        (SELECT h.value FROM jsonb_each_text(headers) AS h WHERE lower(h.key) = 'webhook-id' LIMIT 1),
        (SELECT h.value FROM jsonb_each_text(headers) AS h WHERE lower(h.key) = 'webhook-timestamp' LIMIT 1),
        (SELECT h.value FROM jsonb_each_text(headers) AS h WHERE lower(h.key) = 'webhook-signature' LIMIT 1),
        body, extract(epoch FROM tolerance)::float8)
$$;
COMMENT ON FUNCTION outbox.verify_webhook(text[], jsonb, bytea, interval) IS
    'Standard Webhooks verification: whsec_ secrets check v1, whpk_ public keys check v1a, any of several, within the tolerance';
REVOKE ALL ON FUNCTION outbox._verify_webhook(text[], text, text, text, bytea, float8),
    outbox.verify_webhook(text[], jsonb, bytea, interval) FROM PUBLIC;

--------------------------------------------------------------------------------------------------
-- Compaction by key (issue 26): "compaction": "key" makes a new message of a key supersede the
-- key's older queued one. Rows of compacting destinations are marked (compacts) and indexed;
-- superseded rows are counted (stats().superseded_total, outbox.conservation()) and archived
-- with reason 'superseded' when outbox.retention is on. (stats() and _destination_counters()
-- gain their superseded column where they are made again above.)
--------------------------------------------------------------------------------------------------
ALTER TABLE outbox.messages ADD COLUMN compacts boolean;
CREATE INDEX messages_compaction ON outbox.messages (destination, key) WHERE compacts;
ALTER TABLE outbox.archive ADD COLUMN reason text NOT NULL DEFAULT 'delivered'
    CONSTRAINT archive_reason_check CHECK (reason IN ('delivered', 'superseded'));
COMMENT ON TABLE outbox.archive IS
    'delivered messages, kept for outbox.retention (0: not kept), and superseded ones (compaction = key)';
-- _queue_counts() and conservation() gain a superseded column: dropped and made again, with the
-- EXECUTE privileges roles held on conservation() granted back.
DO $compaction$
DECLARE
    grants text[];
    stmt text;
BEGIN
    SELECT coalesce(array_agg(format('GRANT EXECUTE ON FUNCTION outbox.conservation() TO %s%s',
                                     CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                          ELSE quote_ident(r.rolname) END,
                                     CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                                          ELSE '' END)), '{}')
      INTO grants
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
     WHERE p.oid = 'outbox.conservation()'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;

    DROP FUNCTION outbox.conservation();
    DROP FUNCTION outbox._queue_counts();
    -- Per destination: the queue size, the size the counts started from, and since then:
    -- produced, removed (deleted by SQL), delivered, dead-lettered, expired, superseded.
    CREATE FUNCTION outbox._queue_counts(
        OUT destination text, OUT queued bigint, OUT initial bigint,
        OUT produced bigint, OUT removed bigint, OUT delivered bigint, OUT dead_lettered bigint,
        OUT expired bigint, OUT superseded bigint)
    RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_queue_counts' LANGUAGE C;
    -- Every message accounted for since the counts started (server start, or outbox.recount()):
    -- initial + produced = delivered + dead_lettered + expired + removed + superseded + queued,
    -- i.e. balance = 0.
    CREATE FUNCTION outbox.conservation()
    RETURNS TABLE (destination text, initial bigint, produced bigint, delivered bigint,
                   dead_lettered bigint, expired bigint, removed bigint, queued bigint, balance bigint,
                   superseded bigint)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT q.destination, q.initial, q.produced, q.delivered, q.dead_lettered, q.expired,
           q.removed, q.queued,
           q.initial + q.produced - q.delivered - q.dead_lettered - q.expired - q.removed
               - q.superseded - q.queued,
           q.superseded
      FROM outbox._queue_counts() AS q
      JOIN outbox.destinations AS d ON d.name = q.destination
     ORDER BY q.destination
$$;
    COMMENT ON FUNCTION outbox.conservation() IS
        'initial + produced = delivered + dead_lettered + expired + removed + superseded + queued, per destination, since the counts started';
    REVOKE ALL ON FUNCTION outbox.conservation(), outbox._queue_counts() FROM PUBLIC;
    FOREACH stmt IN ARRAY grants LOOP
        EXECUTE stmt;
    END LOOP;
END
$compaction$;
