-- Webhooks and the server's network: a literal address (in any spelling libcurl accepts) or
-- localhost that outbox.webhook_allowed_networks does not allow is refused when it is written
-- (the regression server allows 127.0.0.0/8 and ::1 only); created_by_superuser records whether
-- a superuser wrote a destination's config as it stands.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SHOW outbox.webhook_allowed_networks;

-- Refused, each with its exact error, and nothing written.
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://169.254.169.254/latest/meta-data/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://0.0.0.0:8080/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://10.1.2.3/hook"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://2886729729/hook"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://0xa9fea9fe/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "https://[fe80::1]/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "https://[fd00::2]:8443/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://[::ffff:10.0.0.1]/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://100.64.0.1/"}');
\echo :SQLSTATE
SELECT outbox.create_destination('h', 'webhook', '{"url": "http://224.0.0.1/"}');
\echo :SQLSTATE
SELECT count(*) FROM outbox.destinations;

-- Allowed here: loopback in every spelling (listed), names (resolved only when connecting),
-- public addresses.
SELECT outbox.create_destination('loop4', 'webhook', '{"url": "http://2130706433:8080/"}');
SELECT outbox.create_destination('loop6', 'webhook', '{"url": "http://[::1]:8080/"}');
SELECT outbox.create_destination('mapped', 'webhook', '{"url": "http://[::ffff:127.0.0.1]/"}');
SELECT outbox.create_destination('local', 'webhook', '{"url": "http://localhost:8080/"}');
SELECT outbox.create_destination('named', 'webhook', '{"url": "https://hooks.example.com/x"}');
SELECT outbox.create_destination('public', 'webhook', '{"url": "https://192.0.2.10/x"}');

-- alter_destination checks a URL it changes, and leaves the rest alone.
SELECT outbox.alter_destination('named', '{"url": "http://192.168.1.1/x"}');
\echo :SQLSTATE
SELECT config->>'url' AS url FROM outbox.destinations WHERE name = 'named';
SELECT outbox.alter_destination('named', '{"max_attempts": 3}');

-- created_by_superuser: a superuser's destinations are true; a manager's are false, and a
-- manager's change of a superuser's config clears it; a superuser's change keeps it.
CREATE ROLE outbox_regress_platform;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_platform;
GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.alter_destination(text, jsonb) TO outbox_regress_platform;
SET ROLE outbox_regress_platform;
SELECT outbox.create_destination('tenant', 'webhook', '{"url": "https://hooks.example.com/t"}');
SELECT outbox.alter_destination('public', '{"max_attempts": 4}');
-- The setting is the superuser's: other roles cannot even read it (42501; the message's
-- wording differs between majors, so only the SQLSTATE is shown).
\set VERBOSITY sqlstate
SHOW outbox.webhook_allowed_networks;
\set VERBOSITY default
-- The platform role is refused internal addresses like everyone.
SELECT outbox.create_destination('tenant2', 'webhook', '{"url": "http://169.254.169.254/"}');
\echo :SQLSTATE
RESET ROLE;
SELECT outbox.alter_destination('named', '{"max_attempts": 5}');
SELECT outbox.alter_destination('tenant', '{"max_attempts": 5}');
SELECT name, created_by_superuser FROM outbox.destinations ORDER BY name;
-- A superuser may vouch for one directly (the check trigger does not fire for that column).
UPDATE outbox.destinations SET created_by_superuser = true WHERE name = 'tenant';
SELECT created_by_superuser FROM outbox.destinations WHERE name = 'tenant';
-- An INSERT gets what it asks for only from a superuser: a restored dump keeps each row's value
-- (create_destination asks for true), a plain INSERT gets the default, and another role asking
-- for true gets false.
INSERT INTO outbox.destinations (name, kind, config, created_by_superuser)
VALUES ('restored_t', 'webhook', '{"url": "https://hooks.example.com/rt"}', true),
       ('restored_f', 'webhook', '{"url": "https://hooks.example.com/rf"}', false);
INSERT INTO outbox.destinations (name, kind, config)
VALUES ('plain', 'webhook', '{"url": "https://hooks.example.com/p"}');
GRANT INSERT ON outbox.destinations TO outbox_regress_platform;
SET ROLE outbox_regress_platform;
INSERT INTO outbox.destinations (name, kind, config, created_by_superuser)
VALUES ('forged', 'webhook', '{"url": "https://hooks.example.com/f"}', true);
RESET ROLE;
REVOKE INSERT ON outbox.destinations FROM outbox_regress_platform;
SELECT name, created_by_superuser FROM outbox.destinations
 WHERE name IN ('restored_t', 'restored_f', 'plain', 'forged') ORDER BY name;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM outbox_regress_platform;
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_platform;
DROP ROLE outbox_regress_platform;
DROP EXTENSION outbox;
