-- Back-pressure: a destination's max_pending and the database's outbox.max_pending refuse an
-- INSERT (or outbox.publish) that would take the queue past them, with SQLSTATE 53400 and
-- nothing of the statement queued. The count is the committed queue plus what transactions in
-- progress (this one too) have queued; a rollback (also to a savepoint) gives the room back.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never
CREATE FUNCTION pg_temp.queue() RETURNS TABLE (destination text, pending bigint, "rows" bigint,
                                               max_pending bigint, refused_total bigint)
LANGUAGE sql AS $$
    SELECT s.destination, s.pending,
           (SELECT count(*) FROM outbox.messages m WHERE m.destination = s.destination),
           s.max_pending, s.refused_total
      FROM outbox.stats() s ORDER BY s.destination
$$;

-- Validation: a whole number from 1 to 1,000,000,000.
SELECT outbox.create_destination('capped', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "max_pending": 0}');
\echo :SQLSTATE
SELECT outbox.create_destination('capped', 'webhook', '{"url": "http://127.0.0.1:1/", "max_pending": "10"}');
\echo :SQLSTATE
SELECT outbox.create_destination('capped', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "max_pending": 2.5}');
SELECT outbox.create_destination('capped', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "max_pending": 1000000001}');
SELECT count(*) AS destinations FROM outbox.destinations;
SELECT outbox.create_destination('capped', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "max_pending": 3}');
SELECT outbox.create_destination('other', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t"}');
SELECT outbox.alter_destination('capped', '{"max_pending": -1}');
\echo :SQLSTATE
SELECT * FROM pg_temp.queue();

-- Up to the cap, then refused: the row that would be the 4th.
INSERT INTO outbox.messages (destination, payload) SELECT 'capped', jsonb_build_object('n', g) FROM generate_series(1, 3) g;
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 4}');
\echo :SQLSTATE
SELECT * FROM pg_temp.queue();

-- A statement that crosses the cap is refused whole.
DELETE FROM outbox.messages WHERE payload->>'n' IN ('2', '3');
INSERT INTO outbox.messages (destination, payload) SELECT 'capped', jsonb_build_object('n', g) FROM generate_series(5, 7) g;
\echo :SQLSTATE
SELECT payload->>'n' AS n FROM outbox.messages ORDER BY id;

-- publish to a full and a free destination: neither row is queued.
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 8}'), ('capped', '{"n": 9}');
SELECT outbox.publish(ARRAY['other', 'capped'], 't', '{"n": 10}') IS NOT NULL AS published;
\echo :SQLSTATE
SELECT * FROM pg_temp.queue();

-- This transaction's rows count before they commit; a rolled-back savepoint gives its room back,
-- and so does a rolled-back transaction (1 queued to start with).
DELETE FROM outbox.messages WHERE destination = 'capped' AND payload->>'n' IN ('8', '9');
BEGIN;
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 11}');
SAVEPOINT s;
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 12}');
ROLLBACK TO s;
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 13}');
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 14}');
ROLLBACK;
SELECT * FROM pg_temp.queue();
BEGIN;
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 15}');
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 16}');
COMMIT;
SELECT * FROM pg_temp.queue();

-- After the counts were lost (outbox.recount()), the next insert takes them again: still exact.
SELECT outbox.recount();
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 17}');
\echo :SQLSTATE
DELETE FROM outbox.messages WHERE destination = 'capped' AND payload->>'n' = '16';
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 18}');
SELECT * FROM pg_temp.queue();

-- A requeued dead letter is an operator's decision: not refused (neither is a restored dump).
INSERT INTO outbox.dead_letters (id, event_id, destination, topic, payload, created_at, attempts,
                                 reason, last_error)
VALUES (1000000, outbox.uuid_generate_v7(), 'capped', 't', '{"n": 19}', now(), 10, 'max_attempts', 'broker said no');
SELECT outbox.requeue(ARRAY[1000000::bigint]) AS requeued;
SELECT * FROM pg_temp.queue();

-- Raising the cap makes room at once; removing it (null) lifts it.
SELECT outbox.alter_destination('capped', '{"max_pending": 5}');
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 20}');
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 21}');
\echo :SQLSTATE
SELECT outbox.alter_destination('capped', '{"max_pending": null}');
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 22}');
SELECT * FROM pg_temp.queue();

-- outbox.max_pending: all destinations of the database together (6 queued now).
SET outbox.max_pending = 7;
INSERT INTO outbox.messages (destination, payload) VALUES ('other', '{"n": 23}');
INSERT INTO outbox.messages (destination, payload) VALUES ('other', '{"n": 24}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('capped', '{"n": 25}');
SELECT * FROM pg_temp.queue();
-- Only a superuser may change it (a producer cannot lift it for itself).
CREATE ROLE outbox_bp_producer;
SET ROLE outbox_bp_producer;
SET outbox.max_pending = 0;
\echo :SQLSTATE
RESET ROLE;
DROP ROLE outbox_bp_producer;
RESET outbox.max_pending;
INSERT INTO outbox.messages (destination, payload) VALUES ('other', '{"n": 26}');
SELECT * FROM pg_temp.queue();
SELECT destination, balance FROM outbox.conservation();

SET outbox.drop_nonempty = on;
DROP EXTENSION outbox;
