# Per-key ordering while several producers write the same keys at once: four sessions commit
# 15 transactions each of 1,000 ordered messages over the same 997 keys as fast as they can,
# while two workers drain the destination. A worker never waits for a producer: it writes a key's row at
# the end of its transaction only if it can lock that very row version now, and skips a row a
# producer holds or has changed. (Its earlier FOR NO KEY UPDATE SKIP LOCKED followed a row
# updated by a producer that committed during the statement to the newer version, and waited
# for the next producer holding that one, whatever SKIP LOCKED says: a deadlock, with that
# producer waiting for a row the worker had written, whenever two producers' turns on a key
# passed by during the worker's write.) Every INSERT commits, the server log shows no
# deadlock, nothing is lost, and for every key first arrivals follow id order.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
$broker->ctl('create busy 16');
my $node = outbox_node('busy', conf => "outbox.workers = 2\nlog_lock_waits = on\n");
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('busy', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "busy", "ordering": "key"}');
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL);
});

# Each transaction: 1,000 messages, 997 keys (three of them twice), recorded with their ids.
my $bench = start_pgbench($node, clients => 4, threads => 4, transactions => 15, script => q{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'busy', 'k' || (g % 997), jsonb_build_object('n', g) FROM generate_series(1, 1000) g
    RETURNING event_id, id, key)
INSERT INTO sent SELECT * FROM m;
});
$bench->finish;
my $out = ${ $bench->{outbox_out} };
my $err = ${ $bench->{outbox_err} };
my ($committed) = $out =~ /number of transactions actually processed: (\d+)/;
my ($failed) = $out =~ /number of failed transactions: (\d+)/;
diag("$committed producer transactions of 1,000 messages committed by 4 clients, "
      . ($failed // '?') . ' failed');
is($failed, 0, 'no producer transaction failed (pgbench counts deadlocks as failures)')
  or diag($out, $err);
unlike($err, qr/ERROR|aborted/, 'no producer session aborted') or diag($err);
cmp_ok($committed // 0, '>=', 30, 'the producers committed transactions side by side');

ok(wait_until(sub {
    $node->safe_psql('postgres', 'SELECT NOT EXISTS (SELECT FROM outbox.messages)') eq 't' }, 300,
    'the queue to drain'), 'the queue drained');
my $log = slurp_file($node->logfile);
my @deadlocks = $log =~ /(deadlock detected)/g;
is(scalar(@deadlocks), 0, 'no deadlock in the server log');
my $repeats = check_key_order($node, 'SELECT event_id, id, key FROM sent',
    $broker->consume('busy', timeout => 300), 'busy producers');
diag("repeats: $repeats");

# A key's row goes when nothing of the key has been queued for 5 minutes: made to look idle that
# long, the rows go at the workers' next sweep (one every 10 s), but for one a session holds,
# which the sweep skips without waiting for it and takes at a sweep after the session ends.
my $idle_rows = q{SELECT count(*) FROM outbox.ordered_keys WHERE destination = 'busy'};
my $idle_k5 = q{SELECT due_at = 'infinity' FROM outbox.ordered_keys WHERE destination = 'busy' AND key = 'k5'};
ok(wait_until(sub { $node->safe_psql('postgres', $idle_rows . q{ AND due_at = 'infinity'}) eq '997' },
    60, 'every key noted as having nothing queued'), 'every key is noted as having nothing queued');
# k5's row is made idle, then taken by the session. A sweep can come in between and take it
# first (CI saw it once: the session then held nothing); then a message of k5 makes the row again.
my $holder = $node->background_psql('postgres');
my $held = '0';
for my $try (1 .. 5) {
    $node->safe_psql('postgres', q{
        UPDATE outbox.ordered_keys SET idle_since = now() - interval '10 minutes'
         WHERE destination = 'busy' AND key = 'k5'});
    $holder->query_safe('BEGIN');
    $held = $holder->query_safe(q{SELECT count(*) FROM (SELECT FROM outbox.ordered_keys
        WHERE destination = 'busy' AND key = 'k5' FOR UPDATE) AS k});
    last if $held eq '1';
    $holder->query_safe('ROLLBACK');
    $node->safe_psql('postgres', q{
        INSERT INTO outbox.messages (destination, key, payload) VALUES ('busy', 'k5', '{"n": -1}')});
    wait_until(sub { $node->safe_psql('postgres', $idle_k5) eq 't' }, 30, 'k5 to have a row again');
}
is($held, '1', 'a session holds the idle row of k5');
$node->safe_psql('postgres', q{
    UPDATE outbox.ordered_keys SET idle_since = now() - interval '10 minutes'
     WHERE destination = 'busy' AND key <> 'k5'});
ok(wait_until(sub { $node->safe_psql('postgres', $idle_rows) eq '1' }, 60, 'the idle rows to go'),
    'the idle keys\' rows went, but for the one a session holds');
is($node->safe_psql('postgres', q{
    SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox worker' AND wait_event_type = 'Lock'}),
    '0', 'no worker waits for the session');
$holder->query_safe('COMMIT');
$holder->quit;
ok(wait_until(sub { $node->safe_psql('postgres', $idle_rows) eq '0' }, 60, 'the held row to go'),
    'the held key\'s row went at a sweep after the session ended');
# The next message of a swept key makes its row again, and goes.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('busy', 'k5', '{"n": 0}')});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT NOT EXISTS (SELECT FROM outbox.messages)') eq 't' }, 30,
    'the new message to go'), 'a new message of a swept key is delivered');
is($node->safe_psql('postgres', $idle_rows), '1', 'and its key has a row again');
check_server_log($node);
done_testing();
