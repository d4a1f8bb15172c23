-- outbox 0.1.0 -> 0.2.0. A fresh 0.2.0 install (sql/outbox--0.2.0.sql) and a 0.1.0 install
-- updated by this script have the same schema (test/t/086_upgrade.pl compares them).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.2.0'" to load this file. \quit

-- Whether a superuser wrote a destination's config as it stands (set by the check trigger):
-- only then may a webhook's error texts quote response bodies. Destinations defined before
-- 0.2.0 were written by someone unknown: false.
ALTER TABLE outbox.destinations ADD COLUMN created_by_superuser boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN outbox.destinations.created_by_superuser IS
    'a superuser wrote the config as it stands: webhook errors may quote response bodies';
