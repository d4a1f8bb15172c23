-- The compose demo's producer (psql script, run by the `seed` service in database app):
-- two destinations, orders written in ordinary transactions with their messages, a wait for the
-- background worker to deliver them, then outbox.stats(). Safe to run again:
--   docker compose -f docker/compose.yaml run --rm seed
\set ON_ERROR_STOP on
\set QUIET on

\echo '== destinations: orders -> Apache Kafka (3 brokers), billing-hook -> webhook-sink'
-- kafka-N:9092 are the brokers' listeners inside the compose network, the addresses they
-- advertise; the topic exists (kafka-init), with replication factor 3.
-- The webhook secret is the manual's example (docs/destinations.md): the sink does not check signatures.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM outbox.stats() WHERE destination = 'orders') THEN
        PERFORM outbox.create_destination('orders', 'kafka',
            '{"bootstrap.servers": "kafka-1:9092,kafka-2:9092,kafka-3:9092", "topic": "orders"}');
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.stats() WHERE destination = 'billing-hook') THEN
        PERFORM outbox.create_destination('billing-hook', 'webhook',
            '{"url": "http://webhook-sink:8080/billing",
              "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
              "headers": {"x-team": "billing"}}');
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS shop_orders (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer   text NOT NULL,
    total      numeric(10, 2) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

\echo '== 3 transactions of 100 orders: each order and its message commit together'
-- One statement per transaction: the orders are inserted and their messages written from the
-- inserted rows. Had the transaction rolled back, neither would exist.
BEGIN;
WITH placed AS (
    INSERT INTO shop_orders (customer, total)
    SELECT 'customer-' || g % 7, (g % 50) * 1.25 + 5 FROM generate_series(1, 100) AS g
    RETURNING id, customer, total
)
INSERT INTO outbox.messages (destination, key, payload, headers)
SELECT 'orders', customer, jsonb_build_object('order', id, 'total', total), '{"x-source": "seed"}'
  FROM placed;
COMMIT;

BEGIN;
WITH placed AS (
    INSERT INTO shop_orders (customer, total)
    SELECT 'customer-' || g % 7, (g % 50) * 1.25 + 5 FROM generate_series(101, 200) AS g
    RETURNING id, customer, total
)
INSERT INTO outbox.messages (destination, key, payload, headers)
SELECT 'orders', customer, jsonb_build_object('order', id, 'total', total), '{"x-source": "seed"}'
  FROM placed;
COMMIT;

-- A rolled-back transaction: its orders and its messages vanish together, nothing is delivered.
BEGIN;
WITH placed AS (
    INSERT INTO shop_orders (customer, total)
    SELECT 'customer-' || g % 7, 1 FROM generate_series(1, 100) AS g
    RETURNING id, customer, total
)
INSERT INTO outbox.messages (destination, key, payload)
SELECT 'orders', customer, jsonb_build_object('order', id, 'rolled_back', true) FROM placed;
ROLLBACK;

BEGIN;
WITH placed AS (
    INSERT INTO shop_orders (customer, total)
    SELECT 'customer-' || g % 7, (g % 50) * 1.25 + 5 FROM generate_series(201, 300) AS g
    RETURNING id, customer, total
)
INSERT INTO outbox.messages (destination, key, payload, headers)
SELECT 'orders', customer, jsonb_build_object('order', id, 'total', total), '{"x-source": "seed"}'
  FROM placed;
COMMIT;

\echo '== invoices to the webhook, and one event fanned out to both destinations'
BEGIN;
INSERT INTO outbox.messages (destination, topic, key, payload)
SELECT 'billing-hook', 'invoice.issued', 'customer-' || g,
       jsonb_build_object('invoice', 1000 + g, 'customer', 'customer-' || g)
  FROM generate_series(1, 5) AS g;
-- One row per destination sharing one event_id, the consumers' dedup key. The topic names the
-- Kafka topic and the webhook's event type (ce-type).
SELECT outbox.publish(ARRAY['orders', 'billing-hook'], 'order.created',
                      '{"order": 301, "total": 42.50}',
                      key => 'customer-301', headers => '{"x-tenant": "demo"}') AS event_id \gset
COMMIT;
\echo '   event_id' :event_id

\echo '== waiting for the background worker (at most 60 s)'
-- Every queued row is pending, in flight, retrying or scheduled, so their sum is what is left to
-- deliver. Each loop statement sees the latest commits.
DO $$
DECLARE
    undelivered bigint;
BEGIN
    FOR i IN 1 .. 120 LOOP
        SELECT coalesce(sum(s.pending + s.in_flight + s.retrying + s.scheduled), 0)
          INTO undelivered FROM outbox.stats() AS s;
        EXIT WHEN undelivered = 0;
        PERFORM pg_sleep(0.5);
    END LOOP;
    IF undelivered > 0 THEN
        RAISE WARNING '% messages not delivered after 60 s: see last_error below', undelivered;
    END IF;
END
$$;

\echo '== SELECT * FROM outbox.stats()'
\pset expanded on
SELECT * FROM outbox.stats();
\pset expanded off
\echo '== SELECT database, worker, state, cycles, claimed, delivered FROM outbox.workers()'
SELECT database, worker, state, cycles, claimed, delivered FROM outbox.workers();

-- Exit non-zero (ON_ERROR_STOP) when something is left or was dead-lettered, so that
-- `docker compose up` shows the seed service failing rather than a silent partial demo.
SELECT coalesce(sum(s.pending + s.in_flight + s.retrying + s.scheduled + s.dead), 0) = 0 AS all_delivered
  FROM outbox.stats() AS s \gset
\if :all_delivered
\echo '== all delivered: see the webhook-sink and consumer logs'
\else
DO $$ BEGIN RAISE EXCEPTION 'not everything was delivered: see outbox.stats() above'; END $$;
\endif
