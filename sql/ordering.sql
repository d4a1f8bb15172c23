-- Per-key ordering: configuration, how producers' messages are numbered and held back, dead
-- letters that hold a key, outbox.skip, outbox.blocked_keys, and turning ordering off.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

-- Settings.
SELECT outbox.create_destination('bad', 'kafka', '{"bootstrap.servers": "b:9092", "ordering": "partition"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'kafka', '{"bootstrap.servers": "b:9092", "ordering": "key", "on_dead": "drop"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'kafka', '{"bootstrap.servers": "b:9092", "on_dead": "skip"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'kafka', '{"bootstrap.servers": "b:9092", "ordering": "key", "partitioner": "random"}');
\echo :SQLSTATE
-- librdkafka checks these only when the producer is created; outbox checks them now.
SELECT outbox.create_destination('bad', 'kafka', '{"bootstrap.servers": "b:9092", "retries": 0}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'kafka', '{"bootstrap.servers": "b:9092", "max.in.flight": 6}');
\echo :SQLSTATE

SELECT outbox.create_destination('ord', 'kafka', '{"bootstrap.servers": "b:9092", "topic": "t", "ordering": "key"}');
SELECT outbox.create_destination('skipper', 'webhook', '{"url": "http://127.0.0.1:1/", "ordering": "key", "on_dead": "skip"}');

-- The first message of a key may go; the next ones of that key wait. Other keys and messages
-- without a key never wait. Within one statement too.
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'a', '{"n": 1}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'a', '{"n": 2}'), ('ord', 'b', '{"n": 1}'), ('ord', 'a', '{"n": 3}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', NULL, '{"n": 1}'), ('ord', NULL, '{"n": 2}');
SELECT key, payload->>'n' AS n, waiting FROM outbox.messages ORDER BY id;
SELECT bool_and(i.id < j.id) AS ids_follow_insert_order
  FROM outbox.messages i JOIN outbox.messages j ON i.key = j.key AND (i.payload->>'n')::int < (j.payload->>'n')::int;
SELECT destination, pending, waiting, blocked_keys FROM outbox.stats() WHERE destination = 'ord';

-- The relay owns the flag.
INSERT INTO outbox.messages (destination, key, payload, waiting) VALUES ('ord', 'c', '{}', true);
\echo :SQLSTATE

-- A dead letter holds its key (on_dead = block, the default): new messages of the key wait.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-1, '0190a8c0-0000-7000-8000-00000000000c', 'ord', 'c', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'c', '{"n": 1}'), ('ord', 'c', '{"n": 2}');
SELECT key, payload->>'n' AS n, waiting FROM outbox.messages WHERE key = 'c' ORDER BY id;
SELECT key, blocked_by, reason, last_error, waiting FROM outbox.blocked_keys('ord');
-- An expired dead letter does not hold its key.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-2, '0190a8c0-0000-7000-8000-00000000000d', 'ord', 'd', '{"n": 0}', now(), 0, 'expired', 'expired');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'd', '{"n": 1}');
SELECT key, waiting FROM outbox.messages WHERE key = 'd';

-- outbox.skip lets the key go on; the dead letter stays, marked.
SELECT outbox.skip(-1);
SELECT key, payload->>'n' AS n, waiting FROM outbox.messages WHERE key = 'c' ORDER BY id;
SELECT id, skipped_at IS NOT NULL AS skipped FROM outbox.dead_letters WHERE id = -1;
SELECT count(*) AS blocked FROM outbox.blocked_keys('ord');
SELECT outbox.skip(-1);
SELECT outbox.skip(12345);
\echo :SQLSTATE
SELECT outbox.skip(NULL);
\echo :SQLSTATE

-- A requeued dead letter goes ahead of the messages of its key that wait (it keeps its lower id).
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-3, '0190a8c0-0000-7000-8000-00000000000e', 'ord', 'e', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'e', '{"n": 1}');
SELECT outbox.requeue(ARRAY[-3::bigint]);
SELECT id, key, payload->>'n' AS n, waiting FROM outbox.messages WHERE key = 'e' ORDER BY id;

-- With on_dead = skip a dead letter does not hold its key.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-4, '0190a8c0-0000-7000-8000-00000000000f', 'skipper', 'f', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('skipper', 'f', '{"n": 1}');
SELECT key, waiting FROM outbox.messages WHERE destination = 'skipper';

-- Turning ordering off lets every waiting message go.
SELECT count(*) AS waiting_before FROM outbox.messages WHERE destination = 'ord' AND waiting;
SELECT outbox.alter_destination('ord', '{"ordering": "none"}');
SELECT count(*) AS waiting_after FROM outbox.messages WHERE destination = 'ord' AND waiting;

DROP EXTENSION outbox;
