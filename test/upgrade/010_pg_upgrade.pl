# pg_upgrade from the previous supported major to this one, with outbox in use: the extension's
# tables carry over (queue, dead letters, destinations, the id sequence), and the new cluster's
# worker then delivers every message exactly once.
#
# Run by test/run_tests (part "upgrade") inside a root that holds an older major beside its
# own: OUTBOX_OLD_INSTALL names it (/usr/lib/postgresql/15 in trixie's root, 18 in
# experimental's), with outbox installed there for that major; the new major is the one on PATH.
#
# - Old cluster: outbox preloaded, a Kafka destination; 3 messages dead-lettered by broker
#   rejections, then 1,000 queued in 4 transactions while the destination is paused; stopped.
# - pg_upgrade --check, then pg_upgrade (copy mode) to a new cluster initialised alike.
# - New cluster: the same extension version, queue, dead letters, paused destination and
#   sequence; stats() counts them; nothing is delivered while paused. Then resume, requeue the
#   dead letters, one more INSERT: every event_id reaches the broker exactly once (kcat), and the
#   new INSERT gets an id above every carried-over one.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old_install = $ENV{OUTBOX_OLD_INSTALL}
  or die "OUTBOX_OLD_INSTALL is not set (run through test/run_tests --pg N upgrade)";

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;

my $conf = join("\n", "shared_preload_libraries = 'outbox'", "outbox.poll_interval = '200ms'",
    "log_min_messages = info", '') . "\n";
my $old = PostgreSQL::Test::Cluster->new('old', install_path => $old_install);
{
    # The run's INITDB_TEMPLATE (test/run_tests) is the new major's data directory: the old
    # server needs its own initdb's.
    delete local $ENV{INITDB_TEMPLATE};
    $old->init;
}
$old->append_conf('postgresql.conf', $conf);
$old->start;
my $old_version = $old->safe_psql('postgres', 'SHOW server_version_num');
$old->safe_psql('postgres', qq{
    CREATE EXTENSION outbox;
    SELECT outbox.create_destination('orders', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "orders", "max_attempts": 3}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'warm-up', '{}');
});
ok(wait_until(sub { stats_row($old, 'orders')->{delivered_total} == 1 }, 30),
    "old cluster (server_version_num $old_version): the warm-up message is delivered");

# Dead letters: the broker rejects the next 3 produce requests for good.
$broker->ctl('errors produce 3 MSG_SIZE_TOO_LARGE');
$old->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'orders', 'dead-' || g, jsonb_build_object('n', g) FROM generate_series(1, 3) g});
ok(wait_until(sub { $old->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq '3' }, 30),
    'old cluster: 3 messages dead-lettered');
$broker->ctl('clear produce');

# The queue: 1,000 messages in 4 transactions, held by a pause.
$old->safe_psql('postgres', q{SELECT outbox.pause('orders')});
for my $t (0 .. 3) {
    $old->safe_psql('postgres', qq{
        INSERT INTO outbox.messages (destination, key, payload, headers)
        SELECT 'orders', 'k' || (g % 50), jsonb_build_object('n', g), '{"origin": "old"}'
          FROM generate_series($t * 250 + 1, $t * 250 + 250) g});
}
my $snapshot_sql = q{
    SELECT (SELECT count(*) FROM outbox.messages) || '|' ||
           (SELECT count(*) FROM outbox.dead_letters) || '|' ||
           (SELECT string_agg(name || ':' || kind || ':' || paused, ',' ORDER BY name)
              FROM outbox.destinations) || '|' ||
           (SELECT extversion FROM pg_extension WHERE extname = 'outbox')};
my $before = $old->safe_psql('postgres', $snapshot_sql);
like($before, qr/^1000\|3\|orders:kafka:true\|/, 'old cluster: 1,000 queued, 3 dead, the destination paused');
my $event_ids_sql = q{
    SELECT event_id FROM outbox.messages UNION ALL SELECT event_id FROM outbox.dead_letters ORDER BY 1};
my @expected = split /\n/, $old->safe_psql('postgres', $event_ids_sql);
my $max_id = $old->safe_psql('postgres', q{
    SELECT greatest((SELECT max(id) FROM outbox.messages), (SELECT max(id) FROM outbox.dead_letters))});
is(scalar(@{ kafka_event_ids($broker, 'orders') }), 1, 'the broker holds the warm-up message only');
$old->stop;
check_server_log($old);

# The new cluster, initialised as the old one was (pg_upgrade wants the same encoding, locale
# and checksum setting).
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf('postgresql.conf', $conf);
my $new_bindir = $new->config_data('--bindir');
my $old_bindir = $old->config_data('--bindir');
# (pg_upgrade writes its logs into the new data directory, pg_upgrade_output.d.)
my @upgrade = ('pg_upgrade', '--no-sync', '-d', $old->data_dir, '-D', $new->data_dir,
    '-b', $old_bindir, '-B', $new_bindir, '-s', $new->host, '-p', $old->port, '-P', $new->port);
command_ok([ @upgrade, '--check' ], 'pg_upgrade --check passes with outbox installed');
command_ok([@upgrade], 'pg_upgrade moves the cluster to the new major');

$new->start;
my $new_version = $new->safe_psql('postgres', 'SHOW server_version_num');
cmp_ok(int($new_version / 10000), '>', int($old_version / 10000),
    "the new cluster runs a newer major ($new_version)");
is($new->safe_psql('postgres', $snapshot_sql), $before,
    'the queue, the dead letters, the destination (still paused) and the extension version carried over');
is_deeply([ split /\n/, $new->safe_psql('postgres', $event_ids_sql) ], \@expected,
    'every event_id carried over, unchanged');
is($new->safe_psql('postgres', q{SELECT config->>'bootstrap.servers' FROM outbox.destinations WHERE name = 'orders'}),
    $bootstrap, 'the destination config carried over');
ok(wait_until(sub { scalar(worker_pids($new)) == 1 }, 30), 'the new cluster runs its worker');
my $s = stats_row($new, 'orders');
is("$s->{pending}|$s->{dead}|" . ($s->{paused} ? 'paused' : 'running'), '1000|3|paused',
    'stats() counts the carried-over queue and dead letters');
ok(wait_for_cycles($new, 3), 'the new worker has turned three times');
is(scalar(@{ kafka_event_ids($broker, 'orders') }), 1, 'nothing is delivered while the destination stays paused');

# Delivery by the new cluster: the queue, the requeued dead letters and one new message.
$new->safe_psql('postgres', q{SELECT outbox.resume('orders')});
is($new->safe_psql('postgres', q{SELECT outbox.requeue('orders')}), '3', 'the 3 dead letters are requeued');
my ($new_id, $new_event) = split /\|/, $new->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'after', '{}')
    RETURNING id || '|' || event_id});
cmp_ok($new_id, '>', $max_id, 'a message produced after the upgrade gets an id above every carried-over one');
ok(wait_until(sub {
    $new->safe_psql('postgres', 'SELECT (SELECT count(*) FROM outbox.messages) + (SELECT count(*) FROM outbox.dead_letters)') eq '0'
}, 90), 'the new cluster delivers everything: nothing queued, no dead letter');
my $warm_up = 1;
my @received = grep { defined } @{ kafka_event_ids($broker, 'orders') };
my %count;
$count{$_}++ for @received;
my @missing = grep { !$count{$_} } @expected, $new_event;
my @repeated = grep { $count{$_} > 1 } keys %count;
is(scalar(@missing), 0, 'every carried-over message and the new one reached the broker')
  or diag("missing: @missing[0 .. ($#missing < 9 ? $#missing : 9)]");
is(scalar(@repeated), 0, 'none of them twice');
is(scalar(@received), scalar(@expected) + 1 + $warm_up, 'and nothing else arrived');
my %cols = map { split /=/, $_, 2 } split /\n/, $new->safe_psql('postgres', q{
    SELECT 'delivered=' || delivered_total FROM outbox.stats() WHERE destination = 'orders'});
is($cols{delivered}, scalar(@expected) + 1, "stats(): the new cluster counts its own deliveries");

$new->stop;
check_server_log($new);
$broker->stop;
done_testing();
