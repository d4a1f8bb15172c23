# outbox.conservation() and outbox.stats() agree from the first call after a server start. Both
# count delivered, dead-lettered, expired and superseded messages since the start; conservation()
# used to count only from the first call of either (when the queue is first counted), so after a
# restart its delivered was 0 while stats()' delivered_total was not. Here, after a restart:
# producers and the worker are busy when conservation() is called first (while the queue is
# counted, under load); then messages are delivered, dead-lettered, expired and superseded.
# conservation() shows the queue at the restart as `initial`, what was produced since, and the
# same totals as stats(); every balance is 0.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('conservation', conf => "outbox.retry_base = '20ms'");
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('a', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "a"}');
    SELECT outbox.create_destination('p', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "p"}');
    SELECT outbox.create_destination('c', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "c", "compaction": "key"}');
    SELECT outbox.pause('p');
    SELECT outbox.pause('c');
    INSERT INTO outbox.messages (destination, payload) SELECT 'a', '{}' FROM generate_series(1, 100);
    INSERT INTO outbox.messages (destination, payload) SELECT 'p', '{}' FROM generate_series(1, 250);
    INSERT INTO outbox.messages (destination, payload, expires_at)
    SELECT 'p', '{}', now() + interval '3 seconds' FROM generate_series(1, 50);
});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'a'}) eq '0' }, 60),
    'before the restart: a delivered its 100');

$node->restart;
my $producers = start_pgbench($node, clients => 2, threads => 2, rate => 400, seconds => 4, script => q{
INSERT INTO outbox.messages (destination, payload) VALUES ('a', '{}');
});
sleep 1.5;
# The first call after the start, while producers commit and the worker delivers.
my $first = $node->safe_psql('postgres', q{SELECT balance FROM outbox.conservation() WHERE destination = 'a'});
is($first, '0', 'the first conservation() after the start, under load: a balances');
ok($producers->finish, 'the producers ran') or diag(${ $producers->{outbox_err} });
my ($committed) = ${ $producers->{outbox_out} } =~ /number of transactions actually processed: (\d+)/;
cmp_ok($committed // 0, '>', 100, "the producers committed $committed messages to a");

# A message dead-lettered, expired ones, a superseded one. The broker fails the next produce
# request, whatever it holds: the producers' messages are all delivered first, so that it holds
# the one message meant to die (a request that also held the last of theirs dead-lettered two).
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'a'}) eq '0' }, 60),
    "the producers' messages to a delivered");
$broker->ctl('errors produce 1 INVALID_RECORD');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) VALUES ('a', '{"dead": true}')});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq '1' }, 30),
    'one message of a is dead-lettered');
sleep 3;   # the 50 with expires_at have expired
$node->safe_psql('postgres', q{SELECT outbox.resume('p')});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('c', 'k', '{"n": 1}')});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('c', 'k', '{"n": 2}')});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination IN ('a', 'p')}) eq '0' }, 60),
    'a and p drained');

my $produced_a = $committed + 1;
my %c = map { my @f = split /\|/; ($f[0] => \@f) } split /\n/, $node->safe_psql('postgres', q{
    SELECT destination, initial, produced, delivered, dead_lettered, expired, superseded, queued, balance
      FROM outbox.conservation() ORDER BY destination});
my %s = map { my @f = split /\|/; ($f[0] => \@f) } split /\n/, $node->safe_psql('postgres', q{
    SELECT destination, delivered_total, dead_lettered_total, expired_total, superseded_total
      FROM outbox.stats() ORDER BY destination});
for my $d (qw(a c p)) {
    is($c{$d}[8], 0, "$d: balance 0");
    is(join(' ', @{ $c{$d} }[3 .. 6]), join(' ', @{ $s{$d} }[1 .. 4]),
        "$d: conservation()'s delivered, dead_lettered, expired, superseded are stats()' totals");
}
is(join(' ', @{ $c{p} }[1 .. 7]), '300 0 250 0 50 0 0',
    'p: initial 300 (queued at the restart), nothing produced since, 250 delivered, 50 expired');
is(join(' ', @{ $c{c} }[1 .. 7]), '0 2 0 0 0 1 1', 'c: 2 produced since the start, 1 superseded, 1 queued');
is($c{a}[1], 0, 'a: initial 0 (empty at the restart)');
is($c{a}[2], $produced_a, "a: produced since the start: the producers' $committed and the dead letter");
is($c{a}[4], 1, 'a: 1 dead-lettered');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
