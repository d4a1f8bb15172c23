-- outbox 0.2.0 -> 0.3.0. A fresh 0.3.0 install (sql/outbox--0.3.0.sql) and a 0.2.0 install
-- updated by this script have the same schema (test/t/086_upgrade.pl compares them).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.3.0'" to load this file. \quit
