-- Run once by the image's entrypoint when it initialises an empty data directory, as
-- $POSTGRES_USER in $POSTGRES_DB, against a temporary server that already preloads outbox (the
-- Dockerfile puts it in postgresql.conf).

CREATE EXTENSION IF NOT EXISTS outbox;

-- Serve the database the entrypoint created. ALTER SYSTEM (postgresql.auto.conf, kept in the data
-- volume) rather than a -c flag: a command-line setting cannot be changed by a reload, and
-- outbox.databases is meant to be (ALTER SYSTEM SET outbox.databases = 'app,other'; SELECT
-- pg_reload_conf()). It takes effect when the real server starts, right after these scripts.
-- \gexec because ALTER SYSTEM takes no expression and cannot run inside a DO block.
SELECT format('ALTER SYSTEM SET outbox.databases = %L', current_database()) \gexec

-- The demo's webhook-sink is reached over the compose network, a private network that webhooks
-- may connect to only where a superuser allows it (docs/security.md). A production server
-- lists only the networks its webhooks need, or none.
ALTER SYSTEM SET outbox.webhook_allowed_networks = '10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16';

-- A login role for postgres_exporter, only when a password for it is given. It gets what the
-- exporter's queries need and no more: the read-only part of outbox.grant_operator()'s set
-- (stats, workers, subscriptions; not pause, resume, requeue or wake), plus pg_monitor for the
-- exporter's built-in PostgreSQL metrics.
\getenv exporter_password OUTBOX_EXPORTER_PASSWORD
\if :{?exporter_password}
CREATE ROLE outbox_exporter LOGIN PASSWORD :'exporter_password';
GRANT pg_monitor TO outbox_exporter;
GRANT USAGE ON SCHEMA outbox TO outbox_exporter;
GRANT EXECUTE ON FUNCTION outbox.stats(), outbox.workers(), outbox.subscriptions() TO outbox_exporter;
\endif
