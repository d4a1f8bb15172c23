-- The queue sizes outbox.stats() shows are kept at commit from what was actually queued: rows an
-- ON CONFLICT clause or another trigger leaves out are not counted, rows committed by COMMIT
-- PREPARED are (the counts are taken again after a PREPARE), and the kept counts agree with the
-- table after each step.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never
SELECT outbox.create_destination('counted', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "counted"}');
CREATE FUNCTION pg_temp.exact() RETURNS text LANGUAGE sql AS $$
    SELECT s.pending || ' pending, ' || (SELECT count(*) FROM outbox.messages m WHERE m.destination = 'counted') || ' rows'
      FROM outbox.stats() s WHERE s.destination = 'counted'
$$;
SELECT pg_temp.exact();

-- Idempotent producers: a unique index of their own on event_id, and ON CONFLICT DO NOTHING.
CREATE UNIQUE INDEX messages_event_once ON outbox.messages (event_id);
INSERT INTO outbox.messages (event_id, destination, payload) VALUES ('0190a8c0-0000-7000-8000-0000000000aa', 'counted', '{}')
    ON CONFLICT (event_id) DO NOTHING;
INSERT INTO outbox.messages (event_id, destination, payload) VALUES ('0190a8c0-0000-7000-8000-0000000000aa', 'counted', '{}')
    ON CONFLICT (event_id) DO NOTHING;
INSERT INTO outbox.messages (event_id, destination, payload) VALUES ('0190a8c0-0000-7000-8000-0000000000aa', 'counted', '{}')
    ON CONFLICT (event_id) DO NOTHING;
SELECT pg_temp.exact();
DROP INDEX outbox.messages_event_once;

-- A BEFORE trigger of a user's that leaves rows out.
CREATE FUNCTION pg_temp.drop_odd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.payload->>'n')::int % 2 = 1 THEN RETURN NULL; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER zz_drop_odd BEFORE INSERT ON outbox.messages FOR EACH ROW EXECUTE FUNCTION pg_temp.drop_odd();
INSERT INTO outbox.messages (destination, payload) SELECT 'counted', jsonb_build_object('n', g) FROM generate_series(1, 10) g;
SELECT pg_temp.exact();
DROP TRIGGER zz_drop_odd ON outbox.messages;

-- Prepared transactions: 150 rows, 100 of them through PREPARE / COMMIT PREPARED, 20 rolled back.
DELETE FROM outbox.messages;
INSERT INTO outbox.messages (destination, payload) SELECT 'counted', '{}' FROM generate_series(1, 50);
BEGIN;
INSERT INTO outbox.messages (destination, payload) SELECT 'counted', '{}' FROM generate_series(1, 100);
PREPARE TRANSACTION 'counted_commit';
BEGIN;
INSERT INTO outbox.messages (destination, payload) SELECT 'counted', '{}' FROM generate_series(1, 20);
PREPARE TRANSACTION 'counted_rollback';
-- (while they are prepared, stats() counts the committed rows: 50)
SELECT pg_temp.exact();
COMMIT PREPARED 'counted_commit';
ROLLBACK PREPARED 'counted_rollback';
SELECT pg_temp.exact();
SELECT destination, produced - removed = queued - initial AS balanced, balance FROM outbox.conservation();

SET outbox.drop_nonempty = on;
DROP EXTENSION outbox;
