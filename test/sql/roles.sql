-- The role grant sets (docs/security.md): outbox.grant_producer, grant_consumer, grant_operator
-- and grant_admin. Each role can run every function its page of the manual tells it to run,
-- and no more; every public function belongs to a set.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

CREATE ROLE outbox_roles_app;
CREATE ROLE outbox_roles_consumer;
CREATE ROLE outbox_roles_ops;
CREATE ROLE outbox_roles_admin;
CREATE ROLE outbox_roles_nobody;

SELECT * FROM outbox.grant_producer('outbox_roles_app');
SELECT * FROM outbox.grant_consumer('outbox_roles_consumer');
SELECT * FROM outbox.grant_operator('outbox_roles_ops');
SELECT * FROM outbox.grant_admin('outbox_roles_admin');
-- Again: granting twice changes nothing.
SELECT count(*) FROM outbox.grant_producer('outbox_roles_app');
-- A quoted name is quoted in the statements.
CREATE ROLE "Outbox Roles Mixed";
SELECT * FROM outbox.grant_consumer('"Outbox Roles Mixed"');
SELECT outbox.grant_producer(NULL);
\echo :SQLSTATE
SELECT outbox.grant_producer('outbox_roles_no_such_role');
\echo :SQLSTATE

-- Only the owner of the extension's objects may hand out its rights.
SET ROLE outbox_roles_admin;
SELECT outbox.grant_operator('outbox_roles_nobody');
\echo :SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION outbox._grant(regrole, text[]), outbox.grant_operator(regrole)
    TO outbox_roles_admin;
SET ROLE outbox_roles_admin;
SELECT outbox.grant_operator('outbox_roles_nobody');
\echo :SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION outbox._grant(regrole, text[]), outbox.grant_operator(regrole)
    FROM outbox_roles_admin;

-- Every public function is in a set (uuid_generate_v7 is PUBLIC's: the event_id default runs
-- with the producer's rights; the grant functions are the owner's).
SELECT p.oid::regprocedure AS in_no_set
  FROM pg_proc AS p
 WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname !~ '^_'
   AND p.proname NOT LIKE 'grant\_%' AND p.proname <> 'uuid_generate_v7'
   AND NOT has_function_privilege('outbox_roles_app', p.oid, 'EXECUTE')
   AND NOT has_function_privilege('outbox_roles_consumer', p.oid, 'EXECUTE')
   AND NOT has_function_privilege('outbox_roles_admin', p.oid, 'EXECUTE')
 ORDER BY 1;
-- Which set holds which function.
SELECT p.proname,
       has_function_privilege('outbox_roles_app', p.oid, 'EXECUTE') AS producer,
       has_function_privilege('outbox_roles_consumer', p.oid, 'EXECUTE') AS consumer,
       has_function_privilege('outbox_roles_ops', p.oid, 'EXECUTE') AS operator,
       has_function_privilege('outbox_roles_admin', p.oid, 'EXECUTE') AS admin
  FROM pg_proc AS p
 WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname !~ '^_'
 ORDER BY p.proname, p.oid::regprocedure::text;
-- Tables: nobody but the owner reads the configs.
SELECT c.relname, r.rolname,
       string_agg(priv, ',' ORDER BY priv) FILTER (WHERE has_table_privilege(r.oid, c.oid, priv)) AS privileges
  FROM pg_class AS c
 CROSS JOIN (SELECT oid, rolname FROM pg_roles WHERE rolname LIKE 'outbox\_roles\_%') AS r
 CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS priv
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r'
 GROUP BY c.relname, r.rolname
HAVING count(*) FILTER (WHERE has_table_privilege(r.oid, c.oid, priv)) > 0
 ORDER BY 1, 2;

-- The admin defines destinations and subscriptions.
SET ROLE outbox_roles_admin;
SELECT outbox.create_destination('orders', 'kafka',
    '{"bootstrap.servers": "kafka.example.com:9092", "topic": "orders", "sasl.password": "hunter2"}');
SELECT outbox.alter_destination('orders', '{"max_attempts": 5}');
SELECT outbox.create_destination('spare', 'webhook', '{"url": "http://127.0.0.1:9/hook"}');
SELECT outbox.drop_destination('spare');
SELECT config FROM outbox.destinations;
\echo :SQLSTATE
RESET ROLE;
CREATE SCHEMA regress_app AUTHORIZATION outbox_roles_admin;
SET ROLE outbox_roles_admin;
CREATE TABLE regress_app.seen (event_id uuid PRIMARY KEY);
CREATE FUNCTION regress_app.apply(m outbox.inbox_message) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO regress_app.seen VALUES (m.event_id) $$;
SELECT outbox.create_subscription('orders-in', 'kafka',
    '{"bootstrap.servers": "kafka.example.com:9092", "topics": ["orders"]}',
    'regress_app.apply(outbox.inbox_message)');
SELECT outbox.alter_subscription('orders-in', '{"batch_size": 100}');
SELECT subscription, kind, paused FROM outbox.subscriptions();
SELECT config FROM outbox.inbox_subscriptions;
\echo :SQLSTATE
RESET ROLE;

-- The producer queues, and gets the ids of what it queued; it reads nothing else.
SET ROLE outbox_roles_app;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'k1', '{"n": 1}')
RETURNING id > 0 AS has_id, event_id IS NOT NULL AS has_event_id;
WITH queued AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'orders', 'k' || g, jsonb_build_object('n', g) FROM generate_series(2, 4) AS g
    RETURNING id, event_id)
SELECT count(*) AS queued, count(DISTINCT event_id) AS event_ids FROM queued;
SELECT outbox.publish(ARRAY['orders'], 'orders', '{"n": 5}') IS NOT NULL AS published;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{}') RETURNING *;
\echo :SQLSTATE
SELECT payload FROM outbox.messages;
\echo :SQLSTATE
SELECT outbox.stats();
\echo :SQLSTATE
SELECT outbox.create_destination('mine', 'webhook', '{"url": "http://127.0.0.1:9/hook"}');
\echo :SQLSTATE
RESET ROLE;

-- A dead letter of a key, and an inbox dead letter, for the operator to act on.
INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload, created_at,
                                 attempts, reason, last_error)
VALUES (nextval('outbox.messages_id_seq'), outbox.uuid_generate_v7(), 'orders', 'orders', 'k9',
        '{"n": 9}', now(), 3, 'rejected', 'HTTP 400'),
       (nextval('outbox.messages_id_seq'), outbox.uuid_generate_v7(), 'orders', 'orders', 'k10',
        '{"n": 10}', now() - interval '40 days', 3, 'rejected', 'HTTP 400');
INSERT INTO outbox.inbox_dead_letters (subscription, topic, "partition", "offset", event_id,
                                       last_error, last_sqlstate)
VALUES ('orders-in', 'orders', 0, 7, outbox.uuid_generate_v7(), 'boom', 'P0001'),
       ('orders-in', 'orders', 0, 8, outbox.uuid_generate_v7(), 'boom', 'P0001');

-- The operator runs everything docs/operations.md, docs/ordering.md and docs/inbox.md show.
SET ROLE outbox_roles_ops;
SELECT destination, kind, pending, dead FROM outbox.stats();
SELECT count(*) >= 0 AS workers FROM outbox.workers();
SELECT destination, produced, balance FROM outbox.conservation();
SELECT outbox.recount();
SELECT outbox.wake();
SELECT outbox.pause('orders');
SELECT outbox.resume('orders');
SELECT count(*) AS queued FROM outbox.messages;
SELECT count(*) AS archived FROM outbox.archive;
SELECT outbox.skip((SELECT id FROM outbox.dead_letters WHERE key = 'k9'));
SELECT * FROM outbox.blocked_keys('orders');
SELECT outbox.purge_dead_letters(interval '30 days');
SELECT outbox.requeue((SELECT array_agg(id) FROM outbox.dead_letters));
SELECT outbox.requeue('orders');
SELECT subscription, topic FROM outbox.subscriptions();
SELECT outbox.requeue_inbox((SELECT array_agg(id) FROM outbox.inbox_dead_letters WHERE "offset" = 7));
SELECT outbox.requeue_inbox('orders-in');
DELETE FROM outbox.inbox_dead_letters WHERE "offset" = 8;
SELECT "offset", requeued_at IS NOT NULL AS requeued FROM outbox.inbox_dead_letters;
SELECT config FROM outbox.destinations;
\echo :SQLSTATE
SELECT outbox.alter_destination('orders', '{"max_attempts": 3}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{}');
\echo :SQLSTATE
RESET ROLE;

-- The consumer deduplicates and verifies, and does nothing else.
SET ROLE outbox_roles_consumer;
SELECT outbox.inbox_accept('billing', '0190b7c0-0000-7000-8000-000000000001');
SELECT outbox.inbox_accept('billing', '0190b7c0-0000-7000-8000-000000000001');
SELECT outbox.verify_webhook(ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
    '{"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
      "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}',
    convert_to('{"test": 2432232314}', 'UTF8'), interval '100 years') AS verified;
SELECT outbox.stats();
\echo :SQLSTATE
RESET ROLE;

-- Nobody: nothing.
SET ROLE outbox_roles_nobody;
SELECT outbox.stats();
\echo :SQLSTATE
RESET ROLE;

SELECT outbox.drop_subscription('orders-in');
DROP SCHEMA regress_app CASCADE;
REVOKE ALL ON SCHEMA outbox FROM outbox_roles_app, outbox_roles_consumer, outbox_roles_ops,
    outbox_roles_admin, outbox_roles_nobody, "Outbox Roles Mixed";
SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
DROP ROLE outbox_roles_app, outbox_roles_consumer, outbox_roles_ops, outbox_roles_admin,
    outbox_roles_nobody, "Outbox Roles Mixed";
