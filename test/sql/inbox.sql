-- The inbox (issue 23): outbox.inbox_accept for consumers other than the worker, and the dedup
-- table it writes.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

-- The first time an event id is seen for a source: true; after that: false.
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000001') AS first;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000001') AS again;
-- Sources are separate: the same id is new for another source.
SELECT outbox.inbox_accept('shipping', '0190a8c0-0000-7000-8000-000000000001') AS other_source;
SELECT subscription, event_id, topic, "partition", "offset", received_at > now() - interval '1 minute' AS received_now
  FROM outbox.inbox ORDER BY 1, 2;

-- In the caller's transaction: a rolled-back effect takes its dedup row with it, so the event
-- is new again; a committed one stays seen.
BEGIN;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000002') AS in_tx;
ROLLBACK;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000002') AS after_rollback;
-- A savepoint rolled back undoes it too.
BEGIN;
SAVEPOINT s;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000003') AS in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000003') AS after_savepoint;
COMMIT;
-- The typical use: apply the effect only when the event is new.
CREATE TABLE applied (event_id uuid, amount int);
INSERT INTO applied SELECT e.id, 10
  FROM (VALUES ('0190a8c0-0000-7000-8000-000000000004'::uuid),
               ('0190a8c0-0000-7000-8000-000000000004'::uuid),
               ('0190a8c0-0000-7000-8000-000000000005'::uuid)) AS e(id)
 WHERE outbox.inbox_accept('billing', e.id);
SELECT event_id, amount FROM applied ORDER BY 1;

-- Bad input: the exact error, and nothing written.
SELECT count(*) AS rows_before FROM outbox.inbox;
SELECT outbox.inbox_accept(NULL, '0190a8c0-0000-7000-8000-000000000009');
\echo :SQLSTATE
SELECT outbox.inbox_accept('', '0190a8c0-0000-7000-8000-000000000009');
\echo :SQLSTATE
SELECT outbox.inbox_accept('-billing', '0190a8c0-0000-7000-8000-000000000009');
\echo :SQLSTATE
SELECT outbox.inbox_accept('bill ing', '0190a8c0-0000-7000-8000-000000000009');
\echo :SQLSTATE
SELECT outbox.inbox_accept(repeat('b', 64), '0190a8c0-0000-7000-8000-000000000009');
\echo :SQLSTATE
SELECT outbox.inbox_accept('billing', NULL);
\echo :SQLSTATE
SELECT count(*) AS rows_after FROM outbox.inbox;
SELECT outbox.inbox_accept(repeat('b', 63), '0190a8c0-0000-7000-8000-000000000009') AS longest_name;

-- The retention setting: 7 days unless set; changed by a reload only.
SELECT name, setting, unit, context FROM pg_settings WHERE name = 'outbox.inbox_retention';
SET outbox.inbox_retention = '1h';
\echo :SQLSTATE

-- Privileges: PUBLIC may not call it or read the table; EXECUTE is enough to use it (the
-- dedup table stays unreadable).
CREATE ROLE outbox_regress_consumer;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_consumer;
SET ROLE outbox_regress_consumer;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000010');
\echo :SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION outbox.inbox_accept(text, uuid) TO outbox_regress_consumer;
SET ROLE outbox_regress_consumer;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000010') AS granted_first;
SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000010') AS granted_again;
SELECT count(*) FROM outbox.inbox;
\echo :SQLSTATE
RESET ROLE;
REVOKE ALL ON FUNCTION outbox.inbox_accept(text, uuid) FROM outbox_regress_consumer;
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_consumer;
DROP ROLE outbox_regress_consumer;

-- pg_dump keeps the dedup rows.
SELECT 'outbox.inbox'::regclass::oid = ANY (extconfig) AS dumped FROM pg_extension WHERE extname = 'outbox';

-- DROP EXTENSION is refused while dedup rows exist (events already applied would be applied
-- again); nothing is lost.
DROP EXTENSION outbox;
\echo :SQLSTATE
DROP SCHEMA outbox CASCADE;
\echo :SQLSTATE
SELECT count(*) AS dedup_rows_kept FROM outbox.inbox;

DROP TABLE applied;
SET outbox.drop_nonempty = on;
DROP EXTENSION outbox;
