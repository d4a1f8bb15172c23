-- outbox 0.1.0 -> 0.2.0. A fresh 0.2.0 install (sql/outbox--0.2.0.sql) and a 0.1.0 install
-- updated by this script have the same schema (test/t/086_upgrade.pl compares them).

\echo Use "ALTER EXTENSION outbox UPDATE TO '0.2.0'" to load this file. \quit

-- outbox.workers() gains driver_pid and driver_restarts: each worker's driver process
-- (outbox-driver). A function's result columns cannot change in place, so it is dropped and
-- created again, and the EXECUTE privileges roles held on it are granted back.
DO $upgrade$
DECLARE
    grants text[];
    stmt text;
BEGIN
    SELECT coalesce(array_agg(format('GRANT EXECUTE ON FUNCTION outbox.workers() TO %s%s',
                                     CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                          ELSE quote_ident(r.rolname) END,
                                     CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION'
                                          ELSE '' END)), '{}')
      INTO grants
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
     WHERE p.oid = 'outbox.workers()'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;

    DROP FUNCTION outbox.workers();
    CREATE FUNCTION outbox.workers(
        OUT pid integer, OUT database text, OUT worker integer, OUT state text,
        OUT destination text, OUT in_flight bigint, OUT started_at timestamptz,
        OUT last_cycle_at timestamptz, OUT cycles bigint, OUT claimed bigint, OUT delivered bigint,
        OUT retried bigint, OUT deferred bigint, OUT dead bigint, OUT expired bigint,
        OUT driver_pid integer, OUT driver_restarts bigint)
    RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_workers' LANGUAGE C;
    COMMENT ON FUNCTION outbox.workers() IS
        'the delivery workers of every served database, live from shared memory: state, current destination, counters, driver process';
    REVOKE ALL ON FUNCTION outbox.workers() FROM PUBLIC;
    FOREACH stmt IN ARRAY grants LOOP
        EXECUTE stmt;
    END LOOP;
END
$upgrade$;
