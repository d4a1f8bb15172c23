# Kafka delivery end to end: 10,000 messages from 4 concurrent producer sessions arrive exactly
# once each with the right topic, key, payload and headers (checked by kcat, an independent
# consumer); rolled-back inserts never arrive; a scheduled message waits for its time.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $node = outbox_node('delivery');
my $bootstrap = $broker->bootstrap;

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "orders"}');
    CREATE TABLE sent (key text PRIMARY KEY, event_id uuid NOT NULL, n bigint NOT NULL);
    CREATE SEQUENCE n_seq;
});

# The workers show up as such in pg_stat_activity.
ok(wait_until(sub {
    $node->safe_psql('postgres',
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox worker'") eq '1' }, 30),
    'one outbox worker runs, named in pg_stat_activity.backend_type');
is($node->safe_psql('postgres',
    "SELECT application_name FROM pg_stat_activity WHERE backend_type = 'outbox worker'"),
    'outbox worker', 'and in application_name');

# 4 sessions, 2,500 single-row transactions each. Each producer also records what it sent, in
# the same transaction.
my $script = PostgreSQL::Test::Utils::tempdir() . '/produce.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set c :client_id
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload, headers)
    SELECT 'orders', 'k' || n, jsonb_build_object('n', n, 'client', :c),
           jsonb_build_object('x-client', :c::text, 'x-n', n::text)
      FROM (SELECT nextval('n_seq') AS n) s
    RETURNING key, event_id, (payload->>'n')::bigint AS n)
INSERT INTO sent SELECT * FROM m;
});
my $start = time;
$node->command_ok(['pgbench', '-n', '-c', '4', '-j', '4', '-t', '2500', '-f', $script,
        '-h', $node->host, '-p', $node->port, 'postgres'], '4 producers commit 10,000 messages');

# Transactions that roll back never reach the broker.
$node->safe_psql('postgres', q{
    BEGIN;
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'rolled-back', '{}');
    ROLLBACK;
});

ok(wait_until(sub {
    my $s = stats_row($node, 'orders');
    $s->{pending} == 0 && $s->{in_flight} == 0 && $s->{delivered_total} == 10000 }, 120),
    'outbox.stats() shows all 10,000 delivered and none pending');
my $elapsed = time - $start;
diag(sprintf('produced and delivered 10,000 messages in %.1f s', $elapsed));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

my %sent = map { my ($k, $e, $n) = split /\|/; ($k => { event_id => $e, n => $n }) }
  split /\n/, $node->safe_psql('postgres', 'SELECT key, event_id, n FROM sent');
is(scalar(keys %sent), 10000, 'the producers recorded 10,000 messages');

my $got = $broker->consume('orders');
my %seen;
my @wrong;
for my $m (@$got) {
    my $k = $m->{key};
    $seen{$k}++;
    my $s = $sent{$k};
    my $h = $m->{headers};
    push @wrong, "unexpected key $k" and next unless $s;
    my $payload = JSON::PP::decode_json($m->{payload});
    push @wrong, "$k: payload $m->{payload}" unless $payload->{n} == $s->{n};
    push @wrong, "$k: ce_id $h->{ce_id} != $s->{event_id}" unless ($h->{ce_id} // '') eq $s->{event_id};
    push @wrong, "$k: ce_type" unless ($h->{ce_type} // '') eq 'orders';
    push @wrong, "$k: ce_specversion" unless ($h->{ce_specversion} // '') eq '1.0';
    push @wrong, "$k: ce_source" unless ($h->{ce_source} // '') eq '/outbox/postgres';
    push @wrong, "$k: ce_time" unless ($h->{ce_time} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    push @wrong, "$k: x-n" unless ($h->{'x-n'} // '') eq $s->{n};
    push @wrong, "$k: x-client" unless ($h->{'x-client'} // '') eq $payload->{client};
}
is(scalar(@$got), 10000, 'kcat reads exactly 10,000 messages from topic orders');
is(scalar(keys %seen), 10000, 'every message arrived') or diag(scalar(keys %seen) . ' distinct keys');
is(scalar(grep { $seen{$_} > 1 } keys %seen), 0, 'none arrived twice');
is(scalar(@wrong), 0, 'every message has the right key, payload and headers')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));
ok(!exists $seen{'rolled-back'}, 'the rolled-back message never reached the broker');

# A message scheduled 10 s ahead is not delivered before its time (checked after three turns
# of the worker, its 200 ms polls included, with room for reading the whole topic back on a
# loaded machine).
my $scheduled_at = time + 10;
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload, available_at)
    VALUES ('orders', 'later', '{"later": true}', now() + interval '10 seconds')});
ok(wait_for_cycles($node, 3), 'the worker has polled three times since');
is($node->safe_psql('postgres', q{
    SELECT attempts || ' ' || (lease_token IS NULL) FROM outbox.messages WHERE key = 'later'}),
    '0 true', 'a message due in 10 s is not claimed by those polls');
ok(!grep({ $_->{key} eq 'later' } @{ $broker->consume('orders') }),
    'a message due in 10 s is not delivered meanwhile');
ok(wait_until(sub { grep { $_->{key} eq 'later' } @{ $broker->consume('orders') } }, 30),
    'it is delivered once due');
cmp_ok(time, '>=', $scheduled_at, 'and not before its available_at');

# The worker's state is visible.
# Between its polls (each a short 'claiming', which one sample can catch) the worker is idle.
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT state FROM outbox.workers()') eq 'idle' }, 10),
    'outbox.workers() shows the worker idle');
is($node->safe_psql('postgres', 'SELECT delivered >= 10001 FROM outbox.workers()'), 't',
    'and counts what it delivered');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
