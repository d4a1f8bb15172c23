-- outbox 0.2.0 -> 0.3.0. A fresh 0.3.0 install (sql/outbox--0.3.0.sql) and a 0.2.0 install
-- updated by this script have the same schema (test/t/086_upgrade.pl compares them).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.3.0'" to load this file. \quit

--------------------------------------------------------------------------------------------------
-- Issue 35, item 6: a database outside outbox.databases. outbox._not_served_reason() says why
-- no worker delivers this database's messages; outbox.stats() shows it as last_error of the
-- destinations with queued messages (the rest of stats() is unchanged).
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._not_served_reason() RETURNS text
    AS 'MODULE_PATHNAME', 'outbox_not_served_reason' LANGUAGE C STABLE;
REVOKE ALL ON FUNCTION outbox._not_served_reason() FROM PUBLIC;
CREATE OR REPLACE FUNCTION outbox.stats()
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
           coalesce(c.delivered, 0), coalesce(c.failed, 0),
           coalesce(CASE WHEN coalesce(q.queued, 0) > 0 THEN outbox._not_served_reason() END,
                    c.last_error),
           c.last_success_at,
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
-- (end of issue 35, item 6)

--------------------------------------------------------------------------------------------------
-- Issue 35, item 6: outbox.subscriptions() shows the lag as unknown (NULL) when there is no high
-- watermark (the cluster cannot be reached, or has not answered yet).
--------------------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION outbox.subscriptions(
    OUT subscription text, OUT kind text, OUT paused boolean, OUT topic text,
    OUT "partition" integer, OUT stored_offset bigint, OUT high_watermark bigint, OUT lag bigint,
    OUT consumed bigint, OUT duplicates bigint, OUT dead_lettered bigint, OUT blocked boolean,
    OUT last_error text, OUT last_record_at timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
