-- outbox 0.2.0 -> 0.3.0. A fresh 0.3.0 install (sql/outbox--0.3.0.sql) and a 0.2.0 install
-- updated by this script have the same schema (test/t/086_upgrade.pl compares them).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.3.0'" to load this file. \quit

-- The insert check's errors raised inside these carry no CONTEXT (src/pg/producer.cpp).
ALTER FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) SET outbox.internal_call = on;
ALTER FUNCTION outbox.requeue(bigint[]) SET outbox.internal_call = on;

--------------------------------------------------------------------------------------------------
-- Role grant sets (docs/security.md): what a producer, a consumer, an operator and an admin
-- need, kept here beside the functions so that a function added to the API is added to its set
-- in the same change. Each grants its set to a role and returns the statements it ran. They run
-- with the caller's rights (not SECURITY DEFINER): only the owner of the extension's objects (a
-- superuser) can grant them.
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._grant(grantee regrole, statements text[])
RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    statement text;
BEGIN
    IF grantee IS NULL THEN
        RAISE EXCEPTION 'outbox needs a role to grant to' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class AS c
                                       WHERE c.oid = 'outbox.messages'::regclass), 'USAGE') THEN
        RAISE EXCEPTION 'permission denied to grant the privileges of outbox'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only the owner of the extension''s objects may grant them.',
                  HINT = 'Run it as a superuser.';
    END IF;
    FOREACH statement IN ARRAY statements LOOP
        -- regrole's text is the role's name quoted as an identifier
        statement := format(statement, grantee);
        EXECUTE statement;
        RETURN NEXT statement;
    END LOOP;
END
$$;

-- Producers: INSERT into outbox.messages (the ids of the rows they queued with RETURNING id,
-- event_id: SELECT on those two columns only) and outbox.publish.
CREATE FUNCTION outbox.grant_producer(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT USAGE ON SCHEMA outbox TO %s',
        'GRANT INSERT, SELECT (id, event_id) ON outbox.messages TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_producer(regrole) IS
    'grant a role what producers need: INSERT into outbox.messages (RETURNING id, event_id) and outbox.publish; returns the GRANT statements';

-- Consumers of our events that deduplicate or verify webhooks in their own transactions.
CREATE FUNCTION outbox.grant_consumer(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT USAGE ON SCHEMA outbox TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.inbox_accept(text, uuid), outbox.verify_webhook(text[], jsonb, bytea, interval) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_consumer(regrole) IS
    'grant a role what consumers of your own need: outbox.inbox_accept and outbox.verify_webhook; returns the GRANT statements';

-- Operators: see the queues and the dead letters (never the destination or subscription
-- configs, which hold secrets), and act on them.
CREATE FUNCTION outbox.grant_operator(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT USAGE ON SCHEMA outbox TO %s',
        'GRANT SELECT ON outbox.messages, outbox.dead_letters, outbox.archive, outbox.inbox_dead_letters TO %s',
        'GRANT DELETE ON outbox.inbox_dead_letters TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.stats(), outbox.workers(), outbox.conservation(), outbox.wake(), outbox.recount() TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.pause(text), outbox.resume(text), outbox.requeue(bigint[]), outbox.requeue(text, timestamp with time zone), outbox.skip(bigint), outbox.blocked_keys(text), outbox.purge_dead_letters(interval, text) TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.subscriptions(), outbox.requeue_inbox(bigint[]), outbox.requeue_inbox(text) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_operator(regrole) IS
    'grant a role what operators need: stats, workers, conservation, the queue and dead letters (not the configs), pause, resume, requeue, skip, purge; returns the GRANT statements';

-- Admins: an operator who also defines destinations and subscriptions.
CREATE FUNCTION outbox.grant_admin(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox.grant_operator(grantee)
    UNION ALL
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb), outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean) TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure), outbox.alter_subscription(text, jsonb), outbox.drop_subscription(text) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_admin(regrole) IS
    'grant a role what admins need: the operator''s set plus creating, altering and dropping destinations and subscriptions; returns the GRANT statements';

--------------------------------------------------------------------------------------------------
-- Descriptions of the columns users read and write (\d+ shows them; docs/reference/sql.md is
-- generated from them and from the COMMENTs above).
--------------------------------------------------------------------------------------------------
COMMENT ON COLUMN outbox.destinations.name IS 'the name producers write in outbox.messages.destination';
COMMENT ON COLUMN outbox.destinations.kind IS 'kafka, webhook, amqp, nats, redis, mqtt or sqs';
COMMENT ON FUNCTION outbox.create_destination(text, text, jsonb) IS
    'define a kafka, webhook, amqp, nats, redis, mqtt or sqs destination; the config is checked now, every problem reported at once';
COMMENT ON COLUMN outbox.destinations.config IS 'the settings (docs/destinations.md), secrets included: readable by the table''s owner only';
COMMENT ON COLUMN outbox.destinations.paused IS 'set by outbox.pause (or a webhook''s 410 Gone): messages keep queueing, none is delivered';

COMMENT ON COLUMN outbox.messages.id IS 'numbered at INSERT; a message keeps it through retries, dead letters and requeues (set by outbox)';
COMMENT ON COLUMN outbox.messages.event_id IS 'UUIDv7, the same on every attempt and for every copy of a publish: the consumer''s deduplication key';
COMMENT ON COLUMN outbox.messages.destination IS 'required: the name of a destination';
COMMENT ON COLUMN outbox.messages.topic IS 'Kafka topic, AMQP routing key or NATS subject; default: the destination''s';
COMMENT ON COLUMN outbox.messages.key IS 'Kafka key; the unit of per-key ordering and compaction (at most 1024 bytes)';
COMMENT ON COLUMN outbox.messages.payload IS 'JSON payload; at most one of payload and payload_bytes (neither: a Kafka tombstone)';
COMMENT ON COLUMN outbox.messages.payload_bytes IS 'binary payload, sent as it is (Avro, Protobuf, a schema registry''s framing)';
COMMENT ON COLUMN outbox.messages.headers IS 'JSON object of strings, sent as headers; content-type and ce_type set the CloudEvents content type and type';
COMMENT ON COLUMN outbox.messages.available_at IS 'not delivered before this (at most 366 days ahead); while a worker holds the message, the end of its lease';
COMMENT ON COLUMN outbox.messages.expires_at IS 'not delivered after this, but dead-lettered as expired (default: available_at + the destination''s ttl)';
COMMENT ON COLUMN outbox.messages.created_at IS 'when it was queued: the CloudEvents time (set by outbox)';
COMMENT ON COLUMN outbox.messages.attempts IS 'delivery attempts spent (set by outbox)';
COMMENT ON COLUMN outbox.messages.lease_token IS 'the claim of the worker that holds the message, NULL when none (set by outbox)';
COMMENT ON COLUMN outbox.messages.last_error IS 'why the last attempt failed or was deferred (set by outbox)';
COMMENT ON COLUMN outbox.messages.first_failed_at IS 'when an attempt first failed: the start of the destination''s retry_budget (set by outbox)';
COMMENT ON COLUMN outbox.messages.order_key IS 'ordering = key: the order of the message''s key (set by outbox)';
COMMENT ON COLUMN outbox.messages.compacts IS 'compaction = key: a newer message of the key supersedes this one (set by outbox)';

COMMENT ON COLUMN outbox.dead_letters.reason IS 'rejected (a permanent failure), max_attempts (max_attempts or retry_budget spent), expired, poison (in flight during outbox.poison_after driver crashes), dropped (drop_destination with force)';
COMMENT ON COLUMN outbox.dead_letters.last_error IS 'the last failure, as the broker or endpoint reported it';
COMMENT ON COLUMN outbox.dead_letters.attempts IS 'delivery attempts spent';
COMMENT ON COLUMN outbox.dead_letters.first_failed_at IS 'when an attempt first failed';
COMMENT ON COLUMN outbox.dead_letters.failed_at IS 'when it became a dead letter';
COMMENT ON COLUMN outbox.dead_letters.skipped_at IS 'set by outbox.skip: it no longer holds back the later messages of its key (ordering = key, on_dead = block)';

COMMENT ON COLUMN outbox.archive.delivered_at IS 'when it was delivered, or superseded';
COMMENT ON COLUMN outbox.archive.reason IS 'delivered, or superseded by a newer message of its key (compaction = key)';

COMMENT ON COLUMN outbox.inbox.subscription IS 'the subscription that applied the event, or the source given to outbox.inbox_accept';
COMMENT ON COLUMN outbox.inbox.event_id IS 'the event''s id: the record''s ce_id header, the subscription''s event_id_header, or its place in the stream';
COMMENT ON COLUMN outbox.inbox.received_at IS 'when it was applied; swept after outbox.inbox_retention';

COMMENT ON COLUMN outbox.inbox_subscriptions.config IS 'the settings (docs/inbox.md), secrets included: readable by the table''s owner only';
COMMENT ON COLUMN outbox.inbox_subscriptions.handler IS 'the handler, schema-qualified: f(m outbox.inbox_message) RETURNS void';
COMMENT ON COLUMN outbox.inbox_subscriptions.owner IS 'the role that created the subscription; the handler runs as this role';
COMMENT ON COLUMN outbox.inbox_subscriptions.paused IS 'set by outbox.pause: its partitions are not consumed';
COMMENT ON COLUMN outbox.inbox_subscriptions.last_error IS 'why it cannot be consumed now (NULL when it can)';

COMMENT ON COLUMN outbox.inbox_offsets."offset" IS 'the next offset to apply, committed with the handlers'' effects';
COMMENT ON COLUMN outbox.inbox_offsets.high_watermark IS 'the partition''s end offset, as last read from the broker';

COMMENT ON COLUMN outbox.inbox_dead_letters.blocking IS 'on_error = block: its partition stops at this record while the row exists';
COMMENT ON COLUMN outbox.inbox_dead_letters.last_error IS 'the handler''s error';
COMMENT ON COLUMN outbox.inbox_dead_letters.last_sqlstate IS 'the handler''s SQLSTATE';
COMMENT ON COLUMN outbox.inbox_dead_letters.requeued_at IS 'set by outbox.requeue_inbox: to be applied again';

COMMENT ON COLUMN outbox.inbox_message.subscription IS 'the subscription that read the record';
COMMENT ON COLUMN outbox.inbox_message.topic IS 'where the record was read: its topic';
COMMENT ON COLUMN outbox.inbox_message."partition" IS 'where the record was read: its partition';
COMMENT ON COLUMN outbox.inbox_message."offset" IS 'where the record was read: its offset';
COMMENT ON COLUMN outbox.inbox_message.key IS 'the record''s key';
COMMENT ON COLUMN outbox.inbox_message.headers IS 'the record''s headers, name: value (an array of values for a name sent several times)';
COMMENT ON COLUMN outbox.inbox_message.payload IS 'the value, when it is JSON (a JSON content-type or none); else NULL';
COMMENT ON COLUMN outbox.inbox_message.payload_bytes IS 'the value, when it is not JSON; else NULL (both NULL: a tombstone)';
COMMENT ON COLUMN outbox.inbox_message.event_id IS 'what the record is deduplicated by: its ce_id header, the subscription''s event_id_header, or its place in the stream';
COMMENT ON COLUMN outbox.inbox_message."timestamp" IS 'the record''s timestamp';

REVOKE ALL ON FUNCTION outbox._grant(regrole, text[]), outbox.grant_producer(regrole),
    outbox.grant_consumer(regrole), outbox.grant_operator(regrole), outbox.grant_admin(regrole)
    FROM PUBLIC;

--------------------------------------------------------------------------------------------------
-- Issue 35, item 6: a database outside outbox.databases. outbox._not_served_reason() says why
-- no worker delivers this database's messages; outbox.stats() shows it as last_error of the
-- destinations with queued messages (the rest of stats() is unchanged).
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._not_served_reason() RETURNS text
    AS 'MODULE_PATHNAME', 'outbox_not_served_reason' LANGUAGE C STABLE;
REVOKE ALL ON FUNCTION outbox._not_served_reason() FROM PUBLIC;
-- Issue 41: stats() gains delivery, transactions_open and recovered_total, and
-- _destination_counters() the two counters: both are made again, and whoever could run stats()
-- can run the new one (the grants are carried over).
DO $$
BEGIN
    PERFORM pg_catalog.set_config('outbox_upgrade.stats_grantees',
        coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname), ',')
                    FROM pg_catalog.pg_proc AS p,
                         LATERAL pg_catalog.aclexplode(p.proacl) AS a
                    JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee
                   WHERE p.oid = 'outbox.stats()'::pg_catalog.regprocedure
                     AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), ''),
        false);
END
$$;
DROP FUNCTION outbox.stats();
DROP FUNCTION outbox._destination_counters();
CREATE FUNCTION outbox._destination_counters(
    OUT destination text, OUT delivered bigint, OUT failed bigint, OUT dead bigint,
    OUT expired bigint, OUT deferred bigint, OUT last_success_at timestamptz,
    OUT last_error text, OUT stats_reset timestamptz, OUT refused bigint,
    OUT superseded bigint, OUT recovered bigint, OUT transactions_open bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_destination_counters' LANGUAGE C;
CREATE FUNCTION outbox.stats()
RETURNS TABLE (destination text, kind text, paused boolean, pending bigint, in_flight bigint,
               retrying bigint, dead bigint, oldest_pending_age interval, delivered_total bigint,
               failed_total bigint, last_error text, last_success_at timestamptz,
               scheduled bigint, dead_lettered_total bigint, expired_total bigint,
               deferred_total bigint, stats_reset timestamptz, blocked_keys bigint,
               waiting bigint, tls_verify boolean, queue_dead_tuples bigint,
               queue_last_autovacuum timestamptz, max_pending bigint, refused_total bigint,
               superseded_total bigint, delivery text, transactions_open bigint,
               recovered_total bigint)
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
           coalesce(c.delivered, 0), coalesce(c.failed, 0),
           coalesce(CASE WHEN coalesce(q.queued, 0) > 0 THEN outbox._not_served_reason() END,
                    c.last_error),
           c.last_success_at,
           ahead.scheduled + coalesce(keyed.scheduled, 0), coalesce(c.dead, 0),
           coalesce(c.expired, 0), coalesce(c.deferred, 0), c.stats_reset,
           blocked.keys, coalesce(blocked.waiting + keyed.behind_scheduled, 0),
           -- false only where TLS certificate verification was switched off explicitly: every
           -- kind but kafka (librdkafka's property) names it tls_verify (redis, mqtt, sqs: issue 42)
           CASE WHEN d.kind <> 'kafka'
                THEN coalesce((d.config->>'tls_verify')::boolean, true)
                ELSE coalesce((d.config->>'enable.ssl.certificate.verification')::boolean, true) END,
           t.n_dead_tup, t.last_autovacuum,
           (d.config->>'max_pending')::bigint, coalesce(c.refused, 0),
           coalesce(c.superseded, 0),
           -- issue 41: "delivery", and its exactly-once transactions
           coalesce(d.config->>'delivery', 'at_least_once'), coalesce(c.transactions_open, 0),
           coalesce(c.recovered, 0)
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
COMMENT ON FUNCTION outbox.stats() IS
    'one row per destination: queue gauges kept exact at commit, counters since server start';
REVOKE ALL ON FUNCTION outbox.stats(), outbox._destination_counters() FROM PUBLIC;
DO $$
DECLARE
    grantees text := pg_catalog.current_setting('outbox_upgrade.stats_grantees', true);
BEGIN
    IF coalesce(grantees, '') <> '' THEN
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION outbox.stats() TO %s', grantees);
    END IF;
END
$$;
-- (end of issue 35, item 6; issue 41)

--------------------------------------------------------------------------------------------------
-- Issue 35, item 6: outbox.subscriptions() shows the lag as unknown (NULL) when there is no high
-- watermark (the cluster cannot be reached, or has not answered yet).
--------------------------------------------------------------------------------------------------
-- Issue 43: on a hot standby, the NOTICE that says no worker runs there and the figures are as
-- replicated (outbox.stats(), conservation() and workers() send it from C).
CREATE FUNCTION outbox._note_replica() RETURNS boolean
    AS 'MODULE_PATHNAME', 'outbox_note_replica' LANGUAGE C STABLE;
REVOKE ALL ON FUNCTION outbox._note_replica() FROM PUBLIC;
CREATE OR REPLACE FUNCTION outbox.subscriptions(
    OUT subscription text, OUT kind text, OUT paused boolean, OUT topic text,
    OUT "partition" integer, OUT stored_offset bigint, OUT high_watermark bigint, OUT lag bigint,
    OUT consumed bigint, OUT duplicates bigint, OUT dead_lettered bigint, OUT blocked boolean,
    OUT last_error text, OUT last_record_at timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    -- Issue 43: on a hot standby a NOTICE says that no inbox worker reads there.
    SELECT outbox._note_replica();
    -- Issue 35 (item 6): a lag is known only from a high watermark (NULL while the cluster
    -- cannot be reached, or before it answered).
    SELECT s.name, s.kind, s.paused, o.topic, o."partition", o."offset", o.high_watermark,
           CASE WHEN o.high_watermark IS NOT NULL THEN greatest(o.high_watermark - o."offset", 0) END,
           coalesce(o.consumed, 0),
           coalesce(o.duplicates, 0), coalesce(o.dead_lettered, 0),
           EXISTS (SELECT FROM outbox.inbox_dead_letters AS d
                    WHERE d.subscription = s.name AND d.topic = o.topic
                      AND d."partition" = o."partition" AND d.blocking),
           coalesce(s.last_error, o.last_error), o.last_record_at
      FROM outbox.inbox_subscriptions AS s
      LEFT JOIN outbox.inbox_offsets AS o ON o.subscription = s.name
     ORDER BY s.name, o.topic, o."partition"
$$;
-- (end of issue 35, item 6: subscriptions)
