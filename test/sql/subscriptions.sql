-- Subscriptions (the inbox, issue 23): defined, checked at definition time (every problem in
-- one error, secrets never echoed, the handler's signature and its owner's rights), changed,
-- paused, dropped, and shown by outbox.subscriptions().
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

CREATE SCHEMA app;
CREATE TABLE app.orders (event_id uuid PRIMARY KEY, body jsonb);
CREATE FUNCTION app.apply_order(m outbox.inbox_message) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO app.orders VALUES (m.event_id, m.payload) $$;
-- Handlers that are not one.
CREATE FUNCTION app.two_args(m outbox.inbox_message, n int) RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION app.wrong_arg(m jsonb) RETURNS void LANGUAGE sql AS $$ SELECT $$;
CREATE FUNCTION app.returns_int(m outbox.inbox_message) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION app.returns_set(m outbox.inbox_message) RETURNS SETOF void LANGUAGE sql AS $$ SELECT $$;
CREATE PROCEDURE app.a_procedure(m outbox.inbox_message) LANGUAGE sql AS $$ SELECT $$;

SELECT outbox.create_subscription('orders-in', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "topics": ["orders", "refunds"], "on_error": "block",
      "event_id_header": "x-event-id", "batch_size": 200, "fetch.wait.max.ms": 10,
      "sasl.password": "hunter2"}',
    'app.apply_order(outbox.inbox_message)');
-- The handler is stored schema-qualified; the owner is the calling role.
SELECT name, kind, handler, owner = current_user::regrole AS owned_by_caller, paused,
       config->'topics' AS topics
  FROM outbox.inbox_subscriptions;
-- Before the workers first read it: one row, no partition yet, the lag unknown (NULL).
SELECT * FROM outbox.subscriptions();

-- Same name twice.
SELECT outbox.create_subscription('orders-in', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "topics": ["orders"]}', 'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE

-- Every problem of a config at once, each librdkafka property checked by librdkafka; a
-- secret's value never appears.
SELECT outbox.create_subscription('bad', 'kafka',
    '{"topics": ["ok", "no spaces", "ok", 7], "on_error": "retry", "batch_size": 0,
      "event_id_header": "bad header", "start": "middle", "no.such.property": 1,
      "fetch.wait.max.ms": "soon", "enable.auto.commit": true, "auto.offset.reset": "earliest",
      "topic": "orders", "max_attempts": 3, "sasl.password": {"x": "hunter2"},
      "internal.termination.signal": 9, "log_cb": "x", "handler_timeout": "forever"}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('bad', 'kafka', '{"bootstrap.servers": "b:9092", "topics": []}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('bad', 'kafka', '{"bootstrap.servers": 9092, "topics": "orders"}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('bad', 'kafka', '[1, 2]', 'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('bad', 'kafka', NULL, 'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE

-- Names, kinds and handlers that are not one.
SELECT outbox.create_subscription('has space', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription(repeat('x', 64), 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription(NULL, 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'webhook', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', NULL, '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}', NULL);
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.two_args(outbox.inbox_message, int)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.wrong_arg(jsonb)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.returns_int(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.returns_set(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.a_procedure(outbox.inbox_message)');
\echo :SQLSTATE
CREATE FUNCTION pg_temp.temp_handler(m outbox.inbox_message) RETURNS void LANGUAGE sql AS $$ SELECT $$;
-- (the message names the session's temporary schema, pg_temp_N: only the SQLSTATE is shown)
\set VERBOSITY sqlstate
SELECT outbox.create_subscription('x', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'pg_temp.temp_handler(outbox.inbox_message)');
\set VERBOSITY default
DROP FUNCTION pg_temp.temp_handler(outbox.inbox_message);
-- None of them was created.
SELECT name FROM outbox.inbox_subscriptions ORDER BY 1;

-- alter_subscription: given keys replace, null removes, every problem checked again.
SELECT outbox.alter_subscription('orders-in', '{"batch_size": 50, "event_id_header": null}');
SELECT config->'batch_size' AS batch_size, config ? 'event_id_header' AS has_header,
       config->'sasl.password' = '"hunter2"' AS secret_kept
  FROM outbox.inbox_subscriptions WHERE name = 'orders-in';
SELECT outbox.alter_subscription('orders-in', '{"batch_size": 100000, "topics": null}');
\echo :SQLSTATE
SELECT outbox.alter_subscription('orders-in', '"x"');
\echo :SQLSTATE
SELECT outbox.alter_subscription('nope', '{"batch_size": 5}');
\echo :SQLSTATE
-- Neither name nor kind changes.
UPDATE outbox.inbox_subscriptions SET name = 'renamed' WHERE name = 'orders-in';
\echo :SQLSTATE
UPDATE outbox.inbox_subscriptions SET kind = 'other' WHERE name = 'orders-in';
\echo :SQLSTATE
SELECT config->'batch_size' AS batch_size_unchanged FROM outbox.inbox_subscriptions WHERE name = 'orders-in';

-- pause and resume take subscriptions too.
SELECT outbox.pause('orders-in');
SELECT subscription, paused FROM outbox.subscriptions();
SELECT outbox.resume('orders-in');
SELECT subscription, paused FROM outbox.subscriptions();
SELECT outbox.pause('neither');
\echo :SQLSTATE

-- outbox.subscriptions(): one row per partition the workers stand in, with the lag (unknown,
-- NULL, without a high watermark).
INSERT INTO outbox.inbox_offsets (subscription, topic, "partition", "offset", high_watermark,
                                  consumed, duplicates, dead_lettered, last_error, last_record_at)
VALUES ('orders-in', 'orders', 0, 120, 150, 119, 3, 1, 'division by zero (22012)', '2026-01-01 00:00:00+00'),
       ('orders-in', 'orders', 1, 80, NULL, 80, 0, 0, NULL, NULL);
SELECT * FROM outbox.subscriptions();

-- inbox_accept refuses a subscription's name: its dedup rows are the workers'.
SELECT outbox.inbox_accept('orders-in', '0190a8c0-0000-7000-8000-000000000001');
\echo :SQLSTATE

-- Ownership: the handler runs as the owner, so the owner must be allowed to execute it, and
-- only the owner (or a superuser) may change or drop the subscription.
CREATE ROLE outbox_regress_app;
CREATE ROLE outbox_regress_other;
GRANT USAGE ON SCHEMA outbox, app TO outbox_regress_app, outbox_regress_other;
GRANT EXECUTE ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure),
    outbox.alter_subscription(text, jsonb), outbox.drop_subscription(text)
    TO outbox_regress_app, outbox_regress_other;
REVOKE EXECUTE ON FUNCTION app.apply_order(outbox.inbox_message) FROM PUBLIC;
SET ROLE outbox_regress_app;
SELECT outbox.create_subscription('app-in', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
\echo :SQLSTATE
-- Settings that make the server run code or read files: a superuser's (the values never shown).
SELECT outbox.create_subscription('app-in', 'kafka',
    '{"bootstrap.servers": "b:9092", "topics": ["t"], "sasl.kerberos.kinit.cmd": "/bin/evil",
      "ssl.ca.location": "/etc/secret/ca.pem"}',
    'app.two_args(outbox.inbox_message, int)');
\echo :SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION app.apply_order(outbox.inbox_message) TO outbox_regress_app;
SET ROLE outbox_regress_app;
SELECT outbox.create_subscription('app-in', 'kafka', '{"bootstrap.servers": "b:9092", "topics": ["t"]}',
    'app.apply_order(outbox.inbox_message)');
SET ROLE outbox_regress_other;
SELECT outbox.alter_subscription('app-in', '{"batch_size": 5}');
\echo :SQLSTATE
SELECT outbox.drop_subscription('app-in');
\echo :SQLSTATE
SET ROLE outbox_regress_app;
SELECT outbox.alter_subscription('app-in', '{"batch_size": 5}');
RESET ROLE;
SELECT name, CASE WHEN owner = current_user::regrole THEN 'the superuser' ELSE owner::text END AS owner,
       config->'batch_size' AS batch_size
  FROM outbox.inbox_subscriptions ORDER BY name;
-- PUBLIC reads neither the configs nor the offsets.
SET ROLE outbox_regress_other;
SELECT * FROM outbox.inbox_subscriptions;
\echo :SQLSTATE
SELECT * FROM outbox.subscriptions();
\echo :SQLSTATE
SET ROLE outbox_regress_app;
SELECT outbox.drop_subscription('app-in');
RESET ROLE;

-- DROP EXTENSION is refused while a subscription exists.
DROP EXTENSION outbox CASCADE;
\echo :SQLSTATE

-- drop_subscription: the offsets go, the dedup rows stay.
INSERT INTO outbox.inbox (subscription, event_id, topic, "partition", "offset")
VALUES ('orders-in', '0190a8c0-0000-7000-8000-000000000001', 'orders', 0, 119);
SELECT outbox.drop_subscription('orders-in');
SELECT outbox.drop_subscription('orders-in');
\echo :SQLSTATE
SELECT count(*) AS offsets_left FROM outbox.inbox_offsets;
SELECT count(*) AS dedup_rows_kept FROM outbox.inbox WHERE subscription = 'orders-in';
SELECT * FROM outbox.subscriptions();

-- pg_dump keeps subscriptions and offsets.
SELECT unnest(extconfig)::regclass AS dumped FROM pg_extension WHERE extname = 'outbox'
 ORDER BY 1::text COLLATE "C";

REVOKE ALL ON SCHEMA outbox, app FROM outbox_regress_app, outbox_regress_other;
REVOKE ALL ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure),
    outbox.alter_subscription(text, jsonb), outbox.drop_subscription(text)
    FROM outbox_regress_app, outbox_regress_other;
REVOKE ALL ON FUNCTION app.apply_order(outbox.inbox_message) FROM outbox_regress_app;
DROP ROLE outbox_regress_app;
DROP ROLE outbox_regress_other;
DROP SCHEMA app CASCADE;
SET outbox.drop_nonempty = on;
DROP EXTENSION outbox;
