# pg_dump and pg_restore bring back the queue: queued messages (ordered and unordered), dead
# letters, the archive, the destinations and the id sequence, exactly; the restored database's
# worker delivers every message once; new messages never collide with restored ids. The
# relay-owned columns stay closed to producers meanwhile (a producer's forged id is refused).
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
# outbox.retention: the archive is kept a day, so the restored database's worker does not sweep
# the restored archive (retention 0 empties it) before it is compared.
my $node = outbox_node('dump',
    conf => "outbox.databases = 'postgres, restored'\nlog_statement = none\noutbox.retention = '1d'");
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('dr', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "dr"}');
    SELECT outbox.create_destination('drk', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "drk", "ordering": "key"}');
    SELECT outbox.pause('dr');
    SELECT outbox.pause('drk');
    -- as if another role had configured it: a restore (by a superuser) must not vouch for it
    UPDATE outbox.destinations SET created_by_superuser = false WHERE name = 'dr';
    INSERT INTO outbox.messages (destination, payload, headers)
        SELECT 'dr', jsonb_build_object('n', g), '{"x-test": "dump"}' FROM generate_series(1, 1000) g;
    INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'drk', 'key' || (g % 50), jsonb_build_object('n', g) FROM generate_series(1, 1000) g;
    INSERT INTO outbox.messages (destination, payload_bytes, available_at)
        VALUES ('dr', '\\x00ff', now() + interval '1 hour');
    INSERT INTO outbox.dead_letters (id, event_id, destination, topic, payload, created_at, attempts, reason, last_error)
        SELECT nextval('outbox.messages_id_seq'), outbox.uuid_generate_v7(), 'dr', 'dr', jsonb_build_object('dead', g),
               now() - interval '1 day', 3, 'rejected', 'HTTP 400' FROM generate_series(1, 10) g;
    INSERT INTO outbox.archive (id, event_id, destination, topic, payload, created_at, attempts)
        SELECT nextval('outbox.messages_id_seq'), outbox.uuid_generate_v7(), 'dr', 'dr', jsonb_build_object('archived', g),
               now() - interval '1 day', 1 FROM generate_series(1, 7) g;
});

# What each table holds, as one text per table (every column a user or the relay relies on).
my %fingerprint = (
    messages => q{SELECT md5(string_agg(concat_ws('|', id, event_id, destination, topic, key, payload, payload_bytes, headers,
                                                 available_at, expires_at, created_at, attempts, lease_token, last_error,
                                                 first_failed_at, order_key), ',' ORDER BY id)) || ' ' || count(*) FROM outbox.messages},
    dead_letters => q{SELECT md5(string_agg(concat_ws('|', id, event_id, destination, topic, payload, created_at, attempts, reason,
                                                     last_error, failed_at), ',' ORDER BY id)) || ' ' || count(*) FROM outbox.dead_letters},
    archive => q{SELECT md5(string_agg(concat_ws('|', id, event_id, destination, payload, created_at, attempts, delivered_at), ','
                                       ORDER BY id)) || ' ' || count(*) FROM outbox.archive},
    destinations => q{SELECT string_agg(concat_ws('|', name, kind, config, paused, created_at, created_by_superuser), ',' ORDER BY name) FROM outbox.destinations},
    sequence => q{SELECT last_value FROM outbox.messages_id_seq},
);
my %before = map { $_ => $node->safe_psql('postgres', $fingerprint{$_}) } keys %fingerprint;
my $tmp = PostgreSQL::Test::Utils::tempdir();
my ($out, $err) = ('', '');
my $ok = IPC::Run::run(['pg_dump', '-Fc', '-h', $node->host, '-p', $node->port, '-f', "$tmp/dump", 'postgres'],
    '>', \$out, '2>', \$err);
ok($ok, 'pg_dump -Fc of a database with the extension and a queue succeeds') or diag($err);
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$ok = IPC::Run::run(['pg_restore', '-h', $node->host, '-p', $node->port, '-d', 'restored', "$tmp/dump"],
    '>', \$out, '2>', \$err);
ok($ok, 'pg_restore into a new database succeeds') or diag($err);
is($err, '', 'pg_restore reports no error');
for my $table (sort keys %fingerprint) {
    is($node->safe_psql('restored', $fingerprint{$table}), $before{$table}, "$table restored exactly");
}
is($node->safe_psql('restored', q{
    SELECT (SELECT count(*) FROM outbox.ordered_keys) = (SELECT count(DISTINCT order_key) FROM outbox.messages)
       AND (SELECT bool_and(k.floor <= (SELECT min(m.id) FROM outbox.messages m WHERE m.order_key = k.order_key))
              FROM outbox.ordered_keys k)}),
    't', 'the ordered keys are rebuilt as the queue is restored');
is($node->safe_psql('restored', q{SELECT sum(pending + scheduled) || ' ' || sum(dead) FROM outbox.stats()}), '2001 10',
    'stats() counts the restored queue and dead letters');

# Producers into the restored queue: new ids, never a restored one; a forged id is refused.
$node->safe_psql('restored', q{
    CREATE ROLE app LOGIN;
    GRANT USAGE ON SCHEMA outbox TO app;
    GRANT INSERT ON outbox.messages TO app;
});
my ($rc, $o, $e) = ('', '', '');
$rc = $node->psql('restored', q{INSERT INTO outbox.messages (id, destination, payload) VALUES (1, 'dr', '{}')},
    stdout => \$o, stderr => \$e, extra_params => ['-U', 'app']);
like($e, qr/column "id" of outbox.messages is managed by outbox/, 'a producer still cannot set id after the restore');
$rc = $node->psql('restored', q{INSERT INTO outbox.messages (destination, payload)
    SELECT 'dr', jsonb_build_object('new', g) FROM generate_series(1, 100) g}, stdout => \$o, stderr => \$e,
    extra_params => ['-U', 'app']);
is($rc, 0, 'new messages go into the restored queue') or diag($e);
is($node->safe_psql('restored', q{SELECT min(id) > greatest((SELECT max(id) FROM outbox.dead_letters), (SELECT max(id) FROM outbox.archive), (SELECT max(id) FROM outbox.messages WHERE NOT payload ? 'new')) FROM outbox.messages WHERE payload ? 'new'}),
    't', 'with ids above every restored one');

# The restored database's worker delivers everything, once.
my @produced = split /\n/, $node->safe_psql('restored', q{SELECT event_id FROM outbox.messages WHERE available_at <= now()});
$node->safe_psql('restored', q{CREATE TABLE sent_ordered AS SELECT event_id, id, key FROM outbox.messages WHERE destination = 'drk'});
$node->safe_psql('restored', q{SELECT outbox.resume('dr'); SELECT outbox.resume('drk')});
ok(wait_until(sub { $node->safe_psql('restored', q{SELECT count(*) FROM outbox.messages WHERE available_at <= now()}) eq '0' }, 90),
    'the restored queue is delivered');
my $received = [ @{ kafka_event_ids($broker, 'dr') }, @{ kafka_event_ids($broker, 'drk') } ];
fault_summary('dump_restore', produced => \@produced, received => $received);
# Nothing is delivered twice because of the restore: a message goes twice only when an attempt
# timed out after the broker had it (at-least-once; on a loaded machine librdkafka's timeout can
# pass), and every such one is a retry the stats count.
my %seen;
my $twice = grep { $seen{$_}++ } @$received;
my $retries = $node->safe_psql('restored', q{SELECT sum(failed_total + deferred_total) FROM outbox.stats()});
cmp_ok($twice, '<=', $retries, "no message was delivered twice but after a retry ($twice twice, $retries retries)");
check_key_order($node, 'SELECT event_id, id, key FROM sent_ordered', $broker->consume('drk'),
    'restored ordered messages', 'restored');
is($node->safe_psql('restored', q{SELECT balance FROM outbox.conservation() WHERE destination = 'drk'}), '0',
    'every restored message is accounted for');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages}), '2001', 'the original queue is untouched');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
