# Real Apache Kafka, "delivery": "exactly_once" with two workers (issue 41): a lease that lapsed
# under another worker is adopted, not sent again blind.
#
# Worker P claims a batch and hands it to its driver, whose transaction commits in Kafka; P
# itself stands still before it can write the batch back (outbox.debug_pause 'publish' holds it
# long enough for the test to SIGSTOP it, found by its pid in that pause's log line). The lease
# lapses; the other worker must not send those rows in a transaction of its own (a
# read_committed consumer would see them twice): it adopts P's transactional.id (fences P's
# producer, reads P's marker), finds that P's batch committed, and deletes its rows without
# sending them (recovered_total). P is let go (SIGCONT): its write-back finds nothing, its
# fenced producer is rebuilt, and later messages, claimed by either worker, go out once.
# Checked with Kafka's own Java consumer, isolation.level=read_committed: nothing lost, nothing
# twice.
# outbox-tap: kafka-cluster shared
use strict;
use warnings;
use OutboxKafka;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $dest = 'eos_adopt';
my $kafka = kafka_cluster();
$kafka->create_topic($dest, partitions => 3);
my $bootstrap = $kafka->bootstrap;
my $node = outbox_node('realkafka_eos_adopt', test_switches => 1, conf => join("\n",
    'outbox.workers = 2', "outbox.lease_timeout = '5s'", 'outbox.batch_size = 500'));
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('$dest', 'kafka', '{"bootstrap.servers": "$bootstrap",
        "topic": "$dest", "delivery": "exactly_once"}')});

# Both workers' producers up (each has read its marker) before the scenario: one message.
my @produced = @{ produce($node, $dest, 1, 1) };
ok(wait_until(sub { queued($node, $dest) == 0 }, 120, 'the first message delivered'),
    'the first message is delivered');

# Every pause in "publish" from now on: the first worker to claim stops there, and the test
# freezes it for good while it stands still.
my $log_from = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.debug_pause = 'publish';
    ALTER SYSTEM SET outbox.debug_pause_ms = 3000});
reload_and_wait($node, 'outbox.debug_pause', 'publish');
push @produced, @{ produce($node, $dest, 2, 41) };
my $pid;
ok(wait_until(sub {
    my $log = slurp_file($node->logfile, $log_from);
    ($pid) = $log =~ /\[(\d+)\][^\n]*outbox: pausing \d+ ms in phase "publish"/;
    return defined $pid;
}, 60, 'a worker pauses with its batch handed to its driver'), 'a worker stands still with its batch sent');
ok(kill('STOP', $pid), "worker $pid frozen (SIGSTOP) before it writes its batch back");
my $frozen_at = time;
# The other worker pauses no more.
$node->safe_psql('postgres', q{ALTER SYSTEM RESET outbox.debug_pause; SELECT pg_reload_conf()});

# The other worker finds the lapsed lease (after 5 s), adopts, and settles the rows.
ok(wait_until(sub { queued($node, $dest) == 0 }, 90, 'the frozen worker\'s rows settled'),
    "the frozen worker's rows leave the queue while it is frozen");
my $log = slurp_file($node->logfile, $log_from);
like($log, qr/outbox: $dest: exactly-once: adopted worker \d+'s transactional\.id .* (\d+) of their messages were in its last committed transaction and are deleted without being sent again/,
    "the server log says that the other worker adopted the frozen worker's transactional.id and what it found");
my ($deleted) = $log =~ /adopted worker \d+'s transactional\.id[^\n]* (\d+) of their messages were in its last committed/;
cmp_ok($deleted // 0, '>', 0, 'the adopted batch had committed: its messages were deleted, not sent again');
my $s = stats_row($node, $dest);
cmp_ok($s->{recovered_total}, '>=', 1, 'recovered_total counts the adopted batch');
diag(sprintf('adoption settled the rows %.1f s after the freeze', time - $frozen_at));

ok(kill('CONT', $pid), "worker $pid let go (SIGCONT)");
# Its write-back finds nothing of its own; its producer was fenced and is rebuilt. More messages
# in small transactions, for both workers to claim.
for my $i (0 .. 9) {
    push @produced, @{ produce($node, $dest, 100 + 10 * $i, 109 + 10 * $i) };
}
ok(wait_until(sub { queued($node, $dest) == 0 }, 120, 'the later messages delivered'),
    'later messages are delivered after the frozen worker came back');
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
    '0', 'nothing dead-lettered');
is(scalar(@produced), 141, '141 messages produced');

$kafka->wait_healthy;
my $got = $kafka->consume($dest, read_committed => 1);
my $r = fault_summary('realkafka_eos_adopt', produced => \@produced,
    received => [ map { $_->{headers}{ce_id} } @$got ]);
is($r->{lost}, 0, 'nothing lost');
is($r->{duplicates}, 0, 'nothing twice (read_committed): the lapsed batch was not sent again');
$s = stats_row($node, $dest);
diag('stats: ' . join(' ', map { "$_=" . ($s->{$_} // '-') }
    qw(delivery transactions_open recovered_total delivered_total failed_total deferred_total)));

$node->stop;
check_server_log($node);
done_testing();
