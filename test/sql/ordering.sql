-- Per-key ordering: configuration, how producers' messages are numbered and which one of a key
-- may go (its head), dead letters that hold a key, outbox.skip, outbox.blocked_keys, and
-- turning ordering off and on.
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

-- A message's head: whether it is the first of its key, the only one of the key a claim takes
-- (messages without a key are not ordered: NULL).
CREATE FUNCTION pg_temp.messages(destination text)
RETURNS TABLE (id bigint, key text, n text, head boolean) LANGUAGE sql AS $$
    SELECT m.id, m.key, m.payload->>'n',
           CASE WHEN m.order_key IS NOT NULL
                THEN m.id IN (SELECT h.id FROM outbox._key_heads($1) AS h) END
      FROM outbox.messages AS m WHERE m.destination = $1 ORDER BY m.id
$$;

-- The first message of a key may go; the next ones of that key wait for it. Other keys and
-- messages without a key never wait. Within one statement too.
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'a', '{"n": 1}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'a', '{"n": 2}'), ('ord', 'b', '{"n": 1}'), ('ord', 'a', '{"n": 3}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', NULL, '{"n": 1}'), ('ord', NULL, '{"n": 2}');
SELECT key, n, head FROM pg_temp.messages('ord');
-- The order key: the destination's hash in the high half (one range per destination), the
-- key's in the low half.
SELECT count(DISTINCT order_key) AS keys, count(DISTINCT order_key >> 32) AS ranges
  FROM outbox.messages WHERE order_key IS NOT NULL;
SELECT bool_and(order_key = outbox._order_key(destination, key)) AS order_keys
  FROM outbox.messages WHERE order_key IS NOT NULL;
-- Each key with queued messages has its row: where its messages begin (no queued message of the
-- key is below its floor) and when its head is due.
SELECT k.key, k.floor <= (SELECT min(m.id) FROM outbox.messages AS m WHERE m.order_key = k.order_key) AS floor_ok,
       k.due_at <= now() AS due, k.order_key = outbox._order_key(k.destination, k.key) AS order_key_ok
  FROM outbox.ordered_keys AS k WHERE k.destination = 'ord' ORDER BY k.key;
SELECT count(*) AS other_destination FROM outbox._key_heads('skipper');
SELECT count(*) AS no_destination FROM outbox._key_heads(NULL);
-- A head this transaction holds locked (the worker's fast path) is still the head: the key's next
-- message never is (the claim skips a locked head). One it deleted is no longer the head: the
-- key's next message is.
BEGIN;
SELECT payload->>'n' AS locked_n FROM outbox.messages WHERE destination = 'ord' AND key = 'a' ORDER BY id LIMIT 1 FOR UPDATE;
SELECT m.key, m.payload->>'n' AS n FROM outbox._key_heads('ord') AS h JOIN outbox.messages AS m ON m.id = h.id ORDER BY m.key;
ROLLBACK;
BEGIN;
DELETE FROM outbox.messages WHERE id = (SELECT min(id) FROM outbox.messages WHERE key = 'a');
SELECT m.key, m.payload->>'n' AS n FROM outbox._key_heads('ord') AS h
  JOIN outbox.messages AS m ON m.id = h.id ORDER BY m.key;
ROLLBACK;
SELECT bool_and(i.id < j.id) AS ids_follow_insert_order
  FROM outbox.messages i JOIN outbox.messages j ON i.key = j.key AND (i.payload->>'n')::int < (j.payload->>'n')::int;
SELECT destination, pending, waiting, blocked_keys FROM outbox.stats() WHERE destination = 'ord';

-- The relay owns the order key.
INSERT INTO outbox.messages (destination, key, payload, order_key) VALUES ('ord', 'c', '{}', 1);
\echo :SQLSTATE

-- A dead letter holds its key (on_dead = block, the default): the head of the key is not claimed
-- while it exists; blocked_keys shows it and what waits behind it.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-1, '0190a8c0-0000-7000-8000-00000000000c', 'ord', 'c', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'c', '{"n": 1}'), ('ord', 'c', '{"n": 2}');
SELECT key, n, head FROM pg_temp.messages('ord') WHERE key = 'c';
SELECT key, blocked_by, reason, last_error, waiting FROM outbox.blocked_keys('ord');
SELECT destination, pending, waiting, blocked_keys FROM outbox.stats() WHERE destination = 'ord';
-- An expired dead letter does not hold its key.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-2, '0190a8c0-0000-7000-8000-00000000000d', 'ord', 'd', '{"n": 0}', now(), 0, 'expired', 'expired');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'd', '{"n": 1}');
SELECT key FROM outbox.blocked_keys('ord') WHERE key = 'd';

-- outbox.skip lets the key go on; the dead letter stays, marked.
SELECT outbox.skip(-1);
SELECT id, skipped_at IS NOT NULL AS skipped FROM outbox.dead_letters WHERE id = -1;
SELECT count(*) AS blocked FROM outbox.blocked_keys('ord');
SELECT outbox.skip(-1);
SELECT outbox.skip(12345);
\echo :SQLSTATE
SELECT outbox.skip(NULL);
\echo :SQLSTATE

-- A requeued dead letter goes ahead of the messages of its key (it keeps its lower id).
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-3, '0190a8c0-0000-7000-8000-00000000000e', 'ord', 'e', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'e', '{"n": 1}');
SELECT outbox.requeue(ARRAY[-3::bigint]);
SELECT id, key, n, head FROM pg_temp.messages('ord') WHERE key = 'e';
-- Its key's floor went down to it, and floor_version changed (a worker about to raise the floor
-- past the key's old head will not).
SELECT floor, floor_version > 0 AS floor_version_changed FROM outbox.ordered_keys WHERE key = 'e';
-- A requeue and ordered inserts can be prepared; they keep their key's turn until COMMIT or
-- ROLLBACK PREPARED.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-5, '0190a8c0-0000-7000-8000-000000000010', 'ord', 'e', '{"n": -1}', now(), 1, 'rejected', 'HTTP 400');
BEGIN;
SELECT outbox.requeue(ARRAY[-5::bigint]);
PREPARE TRANSACTION 'requeue_ordered';
SELECT count(*) AS not_queued_yet FROM outbox.messages WHERE id = -5;
COMMIT PREPARED 'requeue_ordered';
SELECT id, key, n, head FROM pg_temp.messages('ord') WHERE key = 'e';
BEGIN;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'g', '{"n": 1}');
PREPARE TRANSACTION 'produce_rolled_back';
ROLLBACK PREPARED 'produce_rolled_back';
BEGIN;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'g', '{"n": 2}');
PREPARE TRANSACTION 'produce_committed';
COMMIT PREPARED 'produce_committed';
SELECT key, n, head FROM pg_temp.messages('ord') WHERE key = 'g';

-- In one transaction, a key's requeued messages come before its new ones: requeueing after a
-- new message of the same key is refused (the workers must be kept off the key first), and
-- nothing changes; the other way round works.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-6, '0190a8c0-0000-7000-8000-000000000011', 'ord', 'h', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
BEGIN;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'h', '{"n": 1}');
SELECT outbox.requeue(ARRAY[-6::bigint]);
\echo :SQLSTATE
ROLLBACK;
SELECT count(*) AS still_a_dead_letter FROM outbox.dead_letters WHERE id = -6;
SELECT count(*) AS queued FROM outbox.messages WHERE key = 'h';
BEGIN;
SELECT outbox.requeue(ARRAY[-6::bigint]);
INSERT INTO outbox.messages (destination, key, payload) VALUES ('ord', 'h', '{"n": 1}');
COMMIT;
SELECT id, key, n, head FROM pg_temp.messages('ord') WHERE key = 'h';

-- With on_dead = skip a dead letter does not hold its key.
INSERT INTO outbox.dead_letters (id, event_id, destination, key, payload, created_at, attempts, reason, last_error)
VALUES (-4, '0190a8c0-0000-7000-8000-00000000000f', 'skipper', 'f', '{"n": 0}', now(), 1, 'rejected', 'HTTP 400');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('skipper', 'f', '{"n": 1}');
SELECT count(*) AS blocked FROM outbox.blocked_keys('skipper');

-- Turning ordering off lets every message go; turning it on orders the queued messages of a
-- key from then on.
SELECT count(*) AS ordered_before FROM outbox.messages WHERE destination = 'ord' AND order_key IS NOT NULL;
SELECT outbox.alter_destination('ord', '{"ordering": "none"}');
SELECT count(*) AS ordered_after FROM outbox.messages WHERE destination = 'ord' AND order_key IS NOT NULL;
SELECT count(*) AS messages_due_index FROM outbox.messages WHERE destination = 'ord' AND order_key IS NULL;
SELECT outbox.alter_destination('ord', '{"ordering": "key"}');
SELECT key, n, head FROM pg_temp.messages('ord');

-- With nothing queued the keys are not walked, and the gauges of an ordered destination say 0
-- (an unordered one has no blocked_keys).
SELECT outbox.create_destination('quiet', 'kafka', '{"bootstrap.servers": "b:9092", "ordering": "key"}');
SELECT outbox.create_destination('plain', 'kafka', '{"bootstrap.servers": "b:9092"}');
SELECT destination, pending, waiting, blocked_keys FROM outbox.stats()
 WHERE destination IN ('quiet', 'plain') ORDER BY destination;

-- A key's turn on a row that exists is written without a statement (UpdateKeyRow in
-- src/pg/key_order.cpp, which notes where each row is for the session's next turn of its key):
-- the rows, their versions and both indexes must be what UPDATE would leave. Keys made, found
-- through the primary key, found where they were noted, updated by others meanwhile (a due
-- time moved: a new index entry, so the noted place leads nowhere), drained keys due again
-- (the same), a key's row swept and made again, and everything after TRUNCATE.
CREATE EXTENSION amcheck;
SELECT outbox.create_destination('turns', 'kafka', '{"bootstrap.servers": "b:9092", "topic": "t", "ordering": "key"}');
CREATE FUNCTION pg_temp.produce_turns() RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'turns', 'k' || g % 50, jsonb_build_object('n', g) FROM generate_series(1, 200) AS g
$$;
CREATE FUNCTION pg_temp.check_turns() RETURNS TABLE (keys bigint, min_version bigint, max_version bigint,
                                                     due_by_index bigint, indexes_checked bigint,
                                                     heap_corruption bigint) LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM outbox.ordered_keys WHERE destination = 'turns'),
           (SELECT min(version) FROM outbox.ordered_keys WHERE destination = 'turns'),
           (SELECT max(version) FROM outbox.ordered_keys WHERE destination = 'turns'),
           (SELECT count(*) FROM outbox.ordered_keys
             WHERE destination = 'turns' AND due_at <= statement_timestamp()),
           (SELECT count(*) FROM pg_index AS i, LATERAL (SELECT bt_index_check(i.indexrelid, true)) AS c
             WHERE i.indrelid = 'outbox.ordered_keys'::regclass),
           (SELECT count(*) FROM verify_heapam('outbox.ordered_keys'))
$$;
SET enable_seqscan = off;  -- due_by_index reads ordered_keys_due
SELECT pg_temp.produce_turns();  -- makes the 50 rows (version 0)
SELECT pg_temp.produce_turns();  -- through the primary key (1)
SELECT pg_temp.produce_turns();  -- where they were noted (2)
SELECT * FROM pg_temp.check_turns();
UPDATE outbox.ordered_keys SET due_at = 'infinity' WHERE destination = 'turns' AND key < 'k2';
SELECT count(*) AS drained FROM outbox.ordered_keys WHERE destination = 'turns' AND due_at = 'infinity';
SELECT pg_temp.produce_turns();  -- 12 keys due again, 38 where they were noted (3)
SELECT * FROM pg_temp.check_turns();
SELECT pg_temp.produce_turns();  -- (4)
SELECT * FROM pg_temp.check_turns();
-- A key's row swept (nothing of it queued) and made again by the next message of the key.
DELETE FROM outbox.messages WHERE destination = 'turns' AND key = 'k7';
DELETE FROM outbox.ordered_keys WHERE destination = 'turns' AND key = 'k7';
INSERT INTO outbox.messages (destination, key, payload) VALUES ('turns', 'k7', '{"n": 0}');
SELECT version, floor <= (SELECT min(id) FROM outbox.messages WHERE destination = 'turns' AND key = 'k7') AS floor_ok,
       due_at <= now() AS due
  FROM outbox.ordered_keys WHERE destination = 'turns' AND key = 'k7';
TRUNCATE outbox.messages, outbox.ordered_keys;
SELECT pg_temp.produce_turns();  -- (0)
SELECT pg_temp.produce_turns();  -- (1)
SELECT * FROM pg_temp.check_turns();
RESET enable_seqscan;
-- What is queued, with the right order keys.
SELECT count(*) AS messages, bool_and(order_key = outbox._order_key(destination, key)) AS order_keys
  FROM outbox.messages WHERE destination = 'turns';

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
