-- The producer path: a plain INSERT, checked row by row; a refused INSERT leaves nothing behind.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders"}');
SELECT outbox.create_destination('notopic', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092"}');
SELECT outbox.create_destination('hook', 'webhook', '{"url": "http://127.0.0.1:8080/"}');

-- The ordinary case: the relay fills id, event_id (UUIDv7), created_at, available_at, and the
-- destination's default topic.
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('orders', 'customer-1', '{"order": 1}', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}');
SELECT id, destination, topic, key, payload, payload_bytes, headers, attempts, lease_token,
       substr(event_id::text, 15, 1) AS uuid_version, available_at = created_at AS due_now,
       expires_at
  FROM outbox.messages;
-- Binary payloads; a topic of the message's own; a webhook message needs no topic.
INSERT INTO outbox.messages (destination, topic, payload_bytes) VALUES ('orders', 'orders.v2', '\x00ff'::bytea);
INSERT INTO outbox.messages (destination, payload) VALUES ('hook', '"just a string"');
SELECT destination, topic, payload, payload_bytes FROM outbox.messages ORDER BY id;

-- event_ids increase with id, even within one statement.
INSERT INTO outbox.messages (destination, payload) SELECT 'orders', jsonb_build_object('n', g) FROM generate_series(1, 1000) g;
SELECT bool_and(ordered) AS event_ids_increase FROM (
    SELECT event_id > lag(event_id) OVER (ORDER BY id) AS ordered FROM outbox.messages) s
 WHERE ordered IS NOT NULL;
DELETE FROM outbox.messages;

-- Refused, each with its own SQLSTATE, message and hint. Nothing is written by any of them.
INSERT INTO outbox.messages (destination, payload) VALUES ('nope', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES (NULL, '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination) VALUES ('orders');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, payload_bytes) VALUES ('orders', '{}', '\x00');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('notopic', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('orders', 'bad topic', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('orders', repeat('t', 250), '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('hook', '', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', repeat('k', 1025), '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '["a", "b"]');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '"a"');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"retries": 3}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"nested": {"a": "b"}}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-inject": "a\r\nSet-Cookie: evil"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-nul": "a\u0000b"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"bad name": "v"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"Webhook-Signature": "v1,forged"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"ce_id": "mine"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', jsonb_build_object('x-long', repeat('v', 8193)));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers)
SELECT 'orders', '{}', jsonb_object_agg('h' || g, 'v') FROM generate_series(1, 65) g;
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{}', '2100-01-01 00:00:00+00');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, available_at, expires_at) VALUES ('orders', '{}', now() + interval '1 hour', now());
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, attempts) VALUES ('orders', '{}', 3);
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, lease_token) VALUES ('orders', '{}', 42);
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, last_error) VALUES ('orders', '{}', 'x');
\echo :SQLSTATE
-- (id: refused for everyone but the table's owner, see bad_input.sql)
SELECT count(*) AS rows_after_refusals FROM outbox.messages;

-- Accepted edge cases: NULL available_at means now; a header with unicode; 64 headers.
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{}', NULL);
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-name": "Zoë ✓"}');
INSERT INTO outbox.messages (destination, payload, headers)
SELECT 'orders', '{}', jsonb_object_agg('h' || g, 'v') FROM generate_series(1, 64) g;
INSERT INTO outbox.messages (destination, payload, available_at, expires_at)
VALUES ('orders', '{}', now() + interval '366 days' - interval '1 minute', now() + interval '400 days');
SELECT count(*) AS accepted FROM outbox.messages;
DELETE FROM outbox.messages;

-- The payload limit counts the delivered bytes: the JSON text, or the bytea's length.
SET outbox.max_payload_bytes = 100;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', to_jsonb(repeat('a', 98)));  -- 100 bytes
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', to_jsonb(repeat('a', 99)));  -- 101 bytes
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('orders', convert_to(repeat('b', 100), 'UTF8'));
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('orders', convert_to(repeat('b', 101), 'UTF8'));
\echo :SQLSTATE
-- Escaped control characters take six bytes each in the delivered text.
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', to_jsonb(repeat(chr(1), 17)));  -- 104 bytes
\echo :SQLSTATE
RESET outbox.max_payload_bytes;
SELECT length(payload::text) AS json_bytes, length(payload_bytes) AS binary_bytes FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;

-- One bad row refuses the whole statement.
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"n": 1}'), ('nope', '{"n": 2}'), ('orders', '{"n": 3}');
\echo :SQLSTATE
SELECT count(*) FROM outbox.messages;

-- The producer's transaction: rolled back, nothing stays; a refused row inside a savepoint
-- leaves the rest of the transaction intact.
BEGIN;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"rolled": "back"}');
ROLLBACK;
BEGIN;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"kept": 1}');
SAVEPOINT s;
INSERT INTO outbox.messages (destination, payload) VALUES ('nope', '{"refused": 1}');
\echo :SQLSTATE
ROLLBACK TO SAVEPOINT s;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"kept": 2}');
COMMIT;
SELECT payload FROM outbox.messages ORDER BY id;

-- The check cannot be switched off by replication mode.
SET session_replication_role = replica;
INSERT INTO outbox.messages (destination, payload) VALUES ('nope', '{}');
\echo :SQLSTATE
RESET session_replication_role;

-- A destination created in the producer's own transaction is usable at once; one dropped is
-- refused at once.
BEGIN;
SELECT outbox.create_destination('fresh', 'webhook', '{"url": "http://127.0.0.1:8080/"}');
INSERT INTO outbox.messages (destination, payload) VALUES ('fresh', '{}');
ROLLBACK;
INSERT INTO outbox.messages (destination, payload) VALUES ('fresh', '{}');
\echo :SQLSTATE
DELETE FROM outbox.messages;
BEGIN;
SELECT outbox.drop_destination('hook');
INSERT INTO outbox.messages (destination, payload) VALUES ('hook', '{}');
\echo :SQLSTATE
ROLLBACK;
INSERT INTO outbox.messages (destination, payload) VALUES ('hook', '{}');
SELECT destination FROM outbox.messages;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
