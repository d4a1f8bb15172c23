# pg_dump and pg_restore bring back the inbox exactly: subscriptions with their owner (not the
# restoring superuser), handler, config and paused state; their offsets and counters; the dedup
# rows. A restored dedup row still makes its event a duplicate.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('inbox_dump', conf => "log_statement = none");
$node->safe_psql('postgres', q{
    CREATE ROLE inbox_app;
    CREATE SCHEMA app AUTHORIZATION inbox_app;
    GRANT USAGE ON SCHEMA outbox TO inbox_app;
    GRANT EXECUTE ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure) TO inbox_app;
    SET ROLE inbox_app;
    CREATE TABLE app.orders (event_id uuid PRIMARY KEY, body jsonb);
    CREATE FUNCTION app.apply_order(m outbox.inbox_message) RETURNS void LANGUAGE sql
        AS $$ INSERT INTO app.orders VALUES (m.event_id, m.payload) $$;
    -- Created paused (one transaction): the worker never opens it, so nothing it would write
    -- about the unreachable cluster (last_error, forgotten high watermarks) can land between
    -- the fingerprint below and pg_dump.
    BEGIN;
    SELECT outbox.create_subscription('orders-in', 'kafka',
        '{"bootstrap.servers": "127.0.0.1:9", "topics": ["orders"], "on_error": "block",
          "sasl.password": "hunter2"}', 'app.apply_order(outbox.inbox_message)');
    RESET ROLE;
    SELECT outbox.pause('orders-in');
    COMMIT;
    INSERT INTO outbox.inbox_offsets (subscription, topic, "partition", "offset", high_watermark,
                                      consumed, duplicates, dead_lettered, last_error, last_record_at)
    VALUES ('orders-in', 'orders', 0, 1200, 1300, 1190, 10, 1, 'boom (P0001)', now()),
           ('orders-in', 'orders', 1, 7, 7, 7, 0, 0, NULL, now());
    INSERT INTO outbox.inbox (subscription, event_id, topic, "partition", "offset")
    SELECT 'orders-in', gen_random_uuid(), 'orders', 0, g FROM generate_series(0, 999) g;
    SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000042');
});

my %fingerprint = (
    subscriptions => q{SELECT string_agg(concat_ws('|', name, kind, config, handler, owner, paused, created_at, updated_at), ',' ORDER BY name)
                         FROM outbox.inbox_subscriptions},
    offsets => q{SELECT string_agg(concat_ws('|', subscription, topic, "partition", "offset", high_watermark, consumed, duplicates,
                                             dead_lettered, last_error, last_record_at), ',' ORDER BY topic, "partition")
                   FROM outbox.inbox_offsets},
    inbox => q{SELECT md5(string_agg(concat_ws('|', subscription, event_id, topic, "partition", "offset", received_at), ','
                                     ORDER BY subscription, event_id)) || ' ' || count(*) FROM outbox.inbox},
    view => q{SELECT string_agg(concat_ws('|', s.*), ',') FROM outbox.subscriptions() AS s},
);
my %before = map { $_ => $node->safe_psql('postgres', $fingerprint{$_}) } keys %fingerprint;
is($node->safe_psql('postgres', q{SELECT owner FROM outbox.inbox_subscriptions}), 'inbox_app',
    'the subscription is owned by the role that created it');

my $tmp = PostgreSQL::Test::Utils::tempdir();
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(['pg_dump', '-Fc', '-h', $node->host, '-p', $node->port, '-f', "$tmp/dump", 'postgres'],
    '>', \$out, '2>', \$err);
ok($ok, 'pg_dump -Fc of a database with subscriptions succeeds') or diag($err);
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$ok = IPC::Run::run(['pg_restore', '-h', $node->host, '-p', $node->port, '-d', 'restored', "$tmp/dump"],
    '>', \$out, '2>', \$err);
ok($ok, 'pg_restore into a new database succeeds') or diag($err);
is($err, '', 'pg_restore reports no error');
for my $what (sort keys %fingerprint) {
    is($node->safe_psql('restored', $fingerprint{$what}), $before{$what}, "$what restored exactly");
}
is($node->safe_psql('restored', q{SELECT outbox.inbox_accept('billing', '0190a8c0-0000-7000-8000-000000000042')}),
    'f', 'a restored dedup row still makes its event a duplicate');
# The restore went through the check trigger, which resolved the handler in the new database.
is($node->safe_psql('restored', q{
    SELECT handler::regprocedure = 'app.apply_order(outbox.inbox_message)'::regprocedure FROM outbox.inbox_subscriptions}),
    't', 'the handler names the restored function');

$node->safe_psql('postgres', 'DROP DATABASE restored');
check_server_log($node);
$node->stop;
done_testing();
