# Per-key ordering: 100 keys x 200 messages from 8 concurrent sessions, with random retriable
# broker errors and a worker kill mid-way: for every key, the order of first arrival equals the
# order of id, and nothing is lost. A key blocked by a dead letter does not delay other keys;
# skip and requeue release it.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $node = outbox_node('ordering', conf => join("\n",
    "restart_after_crash = on", "outbox.lease_timeout = '5s'", "outbox.retry_base = '20ms'",
    "outbox.retry_max = '200ms'", "outbox.max_attempts = 1000"));
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('ord', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "ord", "ordering": "key",
          "message.send.max.retries": 1}');
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL);
    CREATE SEQUENCE n_seq;
});
# 20% of produce requests fail with a retriable error (librdkafka retries once itself, so many
# failures come back as a retry of the row, with backoff).
$broker->ctl('error_rate produce 20 100000 NOT_ENOUGH_REPLICAS 7');

my $script = PostgreSQL::Test::Utils::tempdir() . '/produce.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'ord', 'k' || (n % 100), jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') AS n) s
    RETURNING event_id, id, key)
INSERT INTO sent SELECT * FROM m;
});
# Two rounds of 8 sessions x 1,250 single-message transactions, delivered as they are produced;
# between the rounds, with messages still queued, the worker is killed (a crash: the server
# restarts every backend, so the producers stop first and start again after).
sub produce_concurrently {
    my ($out, $err) = ('', '');
    my $ok = IPC::Run::run(['pgbench', '-n', '-c', '8', '-j', '4', '-t', '1250', '-f', $script,
            '-h', $node->host, '-p', $node->port, 'postgres'], '>', \$out, '2>', \$err);
    diag($err) unless $ok;
    return $ok;
}
ok(produce_concurrently(), 'round 1: 8 sessions produced 10,000 messages');
my $queued = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages');
cmp_ok($queued, '>', 0, "messages still queued: $queued");
my ($pid) = worker_pids($node);
ok(kill('KILL', $pid), "worker $pid killed mid-way");
ok(wait_until(sub { my @p = eval { worker_pids($node) }; @p && $p[0] != $pid }, 60),
    'the server restarted and a new worker runs');
ok(produce_concurrently(), 'round 2: 8 sessions produced 10,000 more');
is($node->safe_psql('postgres', 'SELECT count(*) FROM sent'), '20000', '20,000 messages recorded');

ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 300),
    'everything delivered');
$broker->ctl('clear produce');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

# Per key, first arrivals in id order.
my $repeats = check_key_order($node, 'SELECT event_id, id, key FROM sent',
    $broker->consume('ord', timeout => 300), '20,000 messages');
diag("$repeats duplicates (after the kill)");

# A dead letter blocks its own key only; skip and requeue release it.
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('blk', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "blk", "ordering": "key"}');
});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('blk', 'warm', '{}')});
ok(wait_until(sub { stats_row($node, 'blk')->{delivered_total} == 1 }, 30), 'blk: warmed up');
$broker->ctl('errors produce 1 INVALID_RECORD');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('blk', 'bad', '{"n": 1}')});
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE key = 'bad'") eq '1' }, 30),
    'the head of key bad is dead-lettered');
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('blk', 'bad', '{"n": 2}'), ('blk', 'bad', '{"n": 3}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('blk', 'good', '{"n": 1}'), ('blk', 'good', '{"n": 2}');
});
ok(wait_until(sub { 2 == grep { $_->{key} eq 'good' } @{ $broker->consume('blk') } }, 30),
    'key good is delivered while key bad is blocked');
ok(wait_for_cycles($node, 3), 'the worker has turned three times since');
is(scalar(grep { $_->{key} eq 'bad' } @{ $broker->consume('blk') }), 0, 'nothing of key bad is delivered');
is($node->safe_psql('postgres', q{SELECT key || ':' || reason || ':' || waiting FROM outbox.blocked_keys('blk')}),
    'bad:dead:rejected:2', 'outbox.blocked_keys shows key bad held by its dead letter, 2 waiting');
is(stats_row($node, 'blk')->{blocked_keys}, 1, 'stats() counts 1 blocked key');

$node->safe_psql('postgres', q{SELECT outbox.skip(id) FROM outbox.dead_letters WHERE key = 'bad'});
ok(wait_until(sub { 2 == grep { $_->{key} eq 'bad' } @{ $broker->consume('blk') } }, 30),
    'after outbox.skip the rest of key bad is delivered');
is(join(',', map { JSON::PP::decode_json($_->{payload})->{n} } grep { $_->{key} eq 'bad' } @{ $broker->consume('blk') }),
    '2,3', 'in order');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.blocked_keys('blk')}), '0', 'no key is blocked');

# Requeue: the dead head goes back first, then the key's later messages follow in order.
$broker->ctl('errors produce 1 INVALID_RECORD');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('blk', 'again', '{"n": 1}')});
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE key = 'again'") eq '1' }, 30),
    'the head of key again is dead-lettered');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('blk', 'again', '{"n": 2}')});
ok(wait_for_cycles($node, 3), 'the worker has turned three times since');
is(scalar(grep { $_->{key} eq 'again' } @{ $broker->consume('blk') }), 0, 'key again is held');
$node->safe_psql('postgres', q{SELECT outbox.requeue(array_agg(id)) FROM outbox.dead_letters WHERE key = 'again'});
ok(wait_until(sub { 2 == grep { $_->{key} eq 'again' } @{ $broker->consume('blk') } }, 30),
    'after requeue both are delivered');
is(join(',', map { JSON::PP::decode_json($_->{payload})->{n} } grep { $_->{key} eq 'again' } @{ $broker->consume('blk') }),
    '1,2', 'the requeued head first');

$node->stop;
check_server_log($node, killed => 1);
$broker->stop;
done_testing();
