-- Brokers and the server's network: the Kafka, RabbitMQ and NATS addresses of a destination or
-- subscription that a role other than a superuser configures may not be a literal loopback,
-- private, link-local or other restricted address (or localhost) unless
-- outbox.broker_allowed_networks lists its network (empty in the regression server). Names are
-- checked when the worker connects. A superuser's brokers may be anywhere.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

CREATE ROLE outbox_regress_tenant;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_tenant;
GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.alter_destination(text, jsonb),
    outbox.create_subscription(text, text, jsonb, regprocedure),
    outbox.alter_subscription(text, jsonb) TO outbox_regress_tenant;
CREATE SCHEMA tenant AUTHORIZATION outbox_regress_tenant;

SET ROLE outbox_regress_tenant;
-- The setting is the superuser's: other roles cannot read it.
\set VERBOSITY sqlstate
SHOW outbox.broker_allowed_networks;
\set VERBOSITY default

-- Refused, each with its exact error, and nothing written.
SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "kafka.example.com:9092,10.1.2.3:9092", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "SASL_SSL://127.1:9093", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "[::1]:9092", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "localhost:9092", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('a', 'amqp', '{"url": "amqp://guest:guest@192.168.1.10:5672/", "exchange": "x"}');
\echo :SQLSTATE
SELECT outbox.create_destination('n', 'nats', '{"servers": ["nats://nats.example.com:4222", "nats://0.0.0.0:4222"], "subject": "s"}');
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) FROM outbox.destinations;
SET ROLE outbox_regress_tenant;

-- Allowed: names (checked when connecting) and public addresses.
SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "kafka.example.com:9092,192.0.2.1:9092", "topic": "t"}');
SELECT outbox.create_destination('a', 'amqp', '{"url": "amqps://rabbit.example.com/", "exchange": "x"}');
SELECT outbox.create_destination('n', 'nats', '{"servers": ["tls://[2001:db8::1]:4222"], "subject": "s"}');
-- alter_destination checks the brokers it changes.
SELECT outbox.alter_destination('k', '{"bootstrap.servers": "172.16.0.1:9092"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('k', '{"max_attempts": 3}');
RESET ROLE;
SELECT name, config->>'bootstrap.servers' AS brokers, created_by_superuser FROM outbox.destinations ORDER BY name;
SET ROLE outbox_regress_tenant;

-- Subscriptions owned by such a role: the same rule for their cluster.
CREATE FUNCTION tenant.apply(m outbox.inbox_message) RETURNS void LANGUAGE sql AS 'SELECT';
SELECT outbox.create_subscription('s', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topics": ["t"]}',
    'tenant.apply(outbox.inbox_message)');
\echo :SQLSTATE
SELECT outbox.create_subscription('s', 'kafka', '{"bootstrap.servers": "kafka.example.com:9092", "topics": ["t"]}',
    'tenant.apply(outbox.inbox_message)');
SELECT outbox.alter_subscription('s', '{"bootstrap.servers": "10.0.0.1:9092"}');
\echo :SQLSTATE
RESET ROLE;
SELECT name, config->>'bootstrap.servers' AS brokers FROM outbox.inbox_subscriptions;

-- A superuser's brokers may be anywhere; a superuser's subscription for the tenant is held to
-- the tenant's rule (its consumer connects as the tenant's would).
SELECT outbox.create_destination('local', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t"}');
SELECT outbox.alter_destination('k', '{"bootstrap.servers": "127.0.0.1:9092"}');
SELECT name, created_by_superuser FROM outbox.destinations WHERE name IN ('k', 'local') ORDER BY name;
INSERT INTO outbox.inbox_subscriptions (name, kind, config, handler, owner)
VALUES ('s2', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topics": ["t"]}',
        'tenant.apply(outbox.inbox_message)', 'outbox_regress_tenant');
\echo :SQLSTATE

SELECT outbox.drop_subscription('s');
DROP SCHEMA tenant CASCADE;
DROP EXTENSION outbox;
DROP ROLE outbox_regress_tenant;
