-- Privileges: PUBLIC gets nothing; a producer can produce; an operator can operate but not read
-- destination configs (they hold secrets).
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('orders', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders", "sasl.password": "hunter2"}');

CREATE ROLE outbox_regress_producer;
CREATE ROLE outbox_regress_operator;
CREATE ROLE outbox_regress_nobody;

-- GRANTs given by hand (outbox.grant_producer and grant_operator give more: test/sql/roles.sql).
GRANT USAGE ON SCHEMA outbox TO outbox_regress_producer;
GRANT INSERT ON outbox.messages TO outbox_regress_producer;
GRANT EXECUTE ON FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) TO outbox_regress_producer;

GRANT USAGE ON SCHEMA outbox TO outbox_regress_operator;
GRANT SELECT ON outbox.messages, outbox.dead_letters TO outbox_regress_operator;
GRANT EXECUTE ON FUNCTION outbox.stats(), outbox.wake(), outbox.pause(text), outbox.resume(text),
    outbox.requeue(bigint[]), outbox.requeue(text, timestamptz) TO outbox_regress_operator;

-- PUBLIC: no schema, no function, no table.
SET ROLE outbox_regress_nobody;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{}');
\echo :SQLSTATE
SELECT outbox.stats();
\echo :SQLSTATE
SELECT * FROM outbox.destinations;
\echo :SQLSTATE
RESET ROLE;
SELECT p.proname, has_function_privilege('outbox_regress_nobody', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace ORDER BY 1, 2;

-- Producer: INSERT and publish; nothing else.
SET ROLE outbox_regress_producer;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"by": "producer"}');
SELECT outbox.publish(ARRAY['orders'], 'orders', '{"by": "publish"}') IS NOT NULL AS published;
INSERT INTO outbox.messages (destination, payload) VALUES ('nope', '{}');
\echo :SQLSTATE
SELECT * FROM outbox.messages;
\echo :SQLSTATE
SELECT * FROM outbox.destinations;
\echo :SQLSTATE
SELECT * FROM outbox.dead_letters;
\echo :SQLSTATE
SELECT outbox.stats();
\echo :SQLSTATE
SELECT outbox.requeue('orders');
\echo :SQLSTATE
SELECT outbox.create_destination('mine', 'webhook', '{"url": "http://127.0.0.1/"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('orders', '{"bootstrap.servers": "evil:9092"}');
\echo :SQLSTATE
SELECT outbox.drop_destination('orders', force => true);
\echo :SQLSTATE
SELECT outbox.pause('orders');
\echo :SQLSTATE
UPDATE outbox.messages SET attempts = 0;
\echo :SQLSTATE
DELETE FROM outbox.messages;
\echo :SQLSTATE
RESET ROLE;

-- Operator: stats, requeue, pause/resume; no configs.
SET ROLE outbox_regress_operator;
SELECT destination, pending FROM outbox.stats();
SELECT payload FROM outbox.messages ORDER BY id;
SELECT outbox.pause('orders');
SELECT outbox.resume('orders');
SELECT outbox.requeue('orders');
SELECT config FROM outbox.destinations;
\echo :SQLSTATE
SELECT outbox.create_destination('mine', 'webhook', '{"url": "http://127.0.0.1/"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('orders', '{"bootstrap.servers": "evil:9092"}');
\echo :SQLSTATE
RESET ROLE;
SELECT config->>'bootstrap.servers' AS unchanged FROM outbox.destinations;

-- A producer cannot hijack the functions it may call with objects of its own.
CREATE SCHEMA outbox_regress_evil AUTHORIZATION outbox_regress_producer;
SET ROLE outbox_regress_producer;
CREATE FUNCTION outbox_regress_evil.unnest(anyarray) RETURNS SETOF anyelement
    LANGUAGE sql AS $$ SELECT NULL::text::anyelement $$;
SET search_path = outbox_regress_evil, pg_catalog, public;
SELECT outbox.publish(ARRAY['orders'], 'orders', '{"by": "search_path"}') IS NOT NULL AS published;
RESET search_path;
RESET ROLE;
SELECT payload FROM outbox.messages ORDER BY id;

DROP SCHEMA outbox_regress_evil CASCADE;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM outbox_regress_producer, outbox_regress_operator;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM outbox_regress_producer, outbox_regress_operator;
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_producer, outbox_regress_operator;
DROP ROLE outbox_regress_producer, outbox_regress_operator, outbox_regress_nobody;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
