-- Dead letters back to the queue, and what outbox.stats() shows of the tables.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders"}');
SELECT outbox.create_destination('hook', 'webhook', '{"url": "http://127.0.0.1:8080/"}');

-- The worker writes dead letters; here they are made by hand, as the worker would.
INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload, created_at,
                                 attempts, reason, last_error, first_failed_at, failed_at, expires_at)
VALUES (101, '0190a8c0-0000-7000-8000-000000000001', 'orders', 'orders', 'k1', '{"n": 1}', now() - interval '2 hours',
        10, 'max_attempts', 'Broker: Not enough in-sync replicas', now() - interval '1 hour', now() - interval '50 minutes', NULL),
       (102, '0190a8c0-0000-7000-8000-000000000002', 'orders', 'orders', 'k2', '{"n": 2}', now() - interval '2 hours',
        1, 'rejected', 'Broker: Message size too large', now() - interval '1 hour', now() - interval '40 minutes', NULL),
       (103, '0190a8c0-0000-7000-8000-000000000003', 'hook', NULL, NULL, '{"n": 3}', now() - interval '2 hours',
        1, 'rejected', 'HTTP 410: gone', now() - interval '1 hour', now() - interval '30 minutes', NULL),
       (104, '0190a8c0-0000-7000-8000-000000000004', 'hook', NULL, NULL, '{"n": 4}', now() - interval '2 hours',
        0, 'expired', 'expired before delivery', NULL, now() - interval '1 minute', now() - interval '2 minutes');

SELECT destination, pending, in_flight, retrying, dead, scheduled FROM outbox.stats();

-- By id: the row comes back with its id and event_id, a fresh budget, no error, no expiry.
SELECT outbox.requeue(ARRAY[101, 999]);
SELECT id, event_id, destination, key, payload, attempts, last_error, first_failed_at, expires_at,
       created_at < now() - interval '1 hour' AS keeps_created_at
  FROM outbox.messages;
SELECT id FROM outbox.dead_letters ORDER BY id;
-- Requeued twice: the second time there is nothing to move.
SELECT outbox.requeue(ARRAY[101]);
SELECT outbox.requeue('{}'::bigint[]);

-- By destination and age: only what failed before the given time.
SELECT outbox.requeue('hook', now() - interval '10 minutes');
SELECT id, destination FROM outbox.messages ORDER BY id;
SELECT outbox.requeue('hook');
SELECT id, destination, expires_at FROM outbox.messages ORDER BY id;
SELECT id FROM outbox.dead_letters ORDER BY id;

SELECT destination, pending, in_flight, retrying, dead, scheduled,
       oldest_pending_age > interval '1 hour' AS old, delivered_total, failed_total
  FROM outbox.stats();

-- Refused.
SELECT outbox.requeue(NULL::bigint[]);
\echo :SQLSTATE
SELECT outbox.requeue('nope');
\echo :SQLSTATE
SELECT outbox.requeue('orders', NULL);
\echo :SQLSTATE
-- A dead letter of a destination that no longer exists cannot be requeued: nothing moves.
SELECT outbox.drop_destination('orders', force => true);
SELECT outbox.requeue(ARRAY[101, 102]);
\echo :SQLSTATE
SELECT id, destination, reason FROM outbox.dead_letters ORDER BY id;
SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders"}');
SELECT outbox.requeue('orders');

-- A scheduled message is neither pending nor retrying.
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{}', now() + interval '1 day');
SELECT destination, pending, retrying, scheduled, dead FROM outbox.stats();
SELECT outbox.wake();

-- Every message is accounted for: what was produced (requeues included) is queued, or was
-- removed by drop_destination.
SELECT destination, initial, produced, delivered, dead_lettered, expired, removed, queued, balance
  FROM outbox.conservation();
-- The kept counts agree with the table.
SELECT s.destination, s.pending + s.scheduled = (SELECT count(*) FROM outbox.messages m WHERE m.destination = s.destination) AS exact
  FROM outbox.stats() s;

-- A requeue leaves nothing behind in its transaction: later inserts in it are numbered and
-- checked as any producer's, ordered and unordered, also after a requeue that moved nothing,
-- and after a requeue in a savepoint that rolled back.
SELECT outbox.create_destination('keyed', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "keyed", "ordering": "key"}');
INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload, created_at, attempts, reason, last_error)
VALUES (201, '0190a8c0-0000-7000-8000-0000000000c9', 'keyed', 'keyed', 'k', '{"n": 0}', now(), 1, 'rejected', 'x'),
       (202, '0190a8c0-0000-7000-8000-0000000000ca', 'orders', 'orders', NULL, '{"n": 0}', now(), 1, 'rejected', 'x');
BEGIN;
SELECT outbox.requeue(ARRAY[201, 202]::bigint[]);
INSERT INTO outbox.messages (destination, key, payload) VALUES ('keyed', 'k', '{"n": 1}'), ('orders', NULL, '{"n": 1}');
SELECT outbox.requeue(ARRAY[]::bigint[]);
INSERT INTO outbox.messages (destination, key, payload) VALUES ('keyed', 'k', '{"n": 2}'), ('orders', NULL, '{"n": 2}');
SAVEPOINT s;
SELECT outbox.requeue(ARRAY[999]::bigint[]);
ROLLBACK TO s;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('keyed', 'k', '{"n": 3}'), ('orders', NULL, '{"n": 3}');
-- and a producer still may not set created_at in it
SAVEPOINT refused;
INSERT INTO outbox.messages (destination, payload, created_at) VALUES ('orders', '{}', now());
\echo :SQLSTATE
ROLLBACK TO refused;
COMMIT;
SELECT id > 202 OR id IN (201, 202) AS id_ok, destination, key, payload->>'n' AS n, created_at IS NOT NULL AS created
  FROM outbox.messages WHERE destination IN ('keyed', 'orders') AND payload ? 'n' AND (key IS NULL OR key = 'k')
 ORDER BY destination, id;
-- The requeued message is the head of its key, ahead of the ones inserted after it.
SELECT m.payload->>'n' AS head_n FROM outbox._key_heads('keyed') h JOIN outbox.messages m ON m.id = h.id;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
