# Fault: the broker rejects 30% of produce requests with a retriable error while producers
# commit ~300 messages/s: NOT_ENOUGH_REPLICAS for 12 s, then REQUEST_TIMED_OUT for 12 s
# (`error_rate produce 30 ...`: each ProduceRequest, the first try or a librdkafka retry, fails
# with probability 0.3; a failed request fails every message in it). Measured: every committed
# event_id arrives (kcat, ce_id header), nothing is dead-lettered, and how many attempts were
# spent (failed_total) and how many messages arrived twice.
#
# max_attempts is 50, not the default 10, on purpose: an attempt is spent only when a message's
# request fails 4 times in a row (librdkafka's own 3 quick retries first), which at a 30% rate
# is rare, but failures are not independent: a failed request fails a whole batch, and with the
# idempotent producer a failed batch can make librdkafka fail the partition's later in-flight
# batches too (sequence reset). Such a message can spend several attempts in a row; this test
# is about losing nothing under retriable errors, not about the dead-letter policy (040 covers
# max_attempts), so the limit is set where a legitimate retry never reaches it.
# outbox-tap: alone -- asserts the producers' rate
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('errors', conf => 'log_statement = none');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('errs', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "errs",
        "max_attempts": 50, "retry_base": "100ms", "retry_max": "1s"}');
    CREATE TABLE produced (event_id uuid PRIMARY KEY);
    CREATE SEQUENCE n_seq;
});
my $produce = recorded_insert('errs');
# Warm up: connected, producer id obtained, topic known, before errors are armed.
$node->safe_psql('postgres', $produce);
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'warm-up message delivered');

my $pgbench = start_pgbench($node, clients => 2, rate => 300, seconds => 28, script => $produce);
sleep 2;   # the schedule of the 28 s: 2 s of steady production first
my %phase;
my $max_attempts_seen = 0;   # the highest attempts count of a queued row, sampled
for my $case (['NOT_ENOUGH_REPLICAS', 11], ['REQUEST_TIMED_OUT', 22]) {
    my ($error, $seed) = @$case;
    # More entries than requests in 12 s; whatever is left is cleared at the end of the phase.
    my $reply = $broker->ctl("error_rate produce 30 100000 $error $seed");
    my $before = stats_row($node, 'errs');
    my ($max_pending, $max_retrying) = (0, 0);
    my $t0 = time;
    while (time - $t0 < 12) {
        my $a = $node->safe_psql('postgres', 'SELECT coalesce(max(attempts), 0) FROM outbox.messages');
        $max_attempts_seen = $a if $a > $max_attempts_seen;
        my $s = stats_row($node, 'errs');
        $max_pending = $s->{pending} if $s->{pending} > $max_pending;
        $max_retrying = $s->{retrying} if $s->{retrying} > $max_retrying;
        sleep 0.5;   # the sampling's pace
    }
    $broker->ctl('clear produce');
    my $after = stats_row($node, 'errs');
    $phase{$error} = $after;
    diag(sprintf('%s at 30%% (%s) for 12 s: %d delivered, %d attempts spent (failed_total), '
          . 'max pending %d, max retrying %d; last_error %s',
        $error, $reply, $after->{delivered_total} - $before->{delivered_total},
        $after->{failed_total} - $before->{failed_total}, $max_pending, $max_retrying,
        $after->{last_error} // 'none'));
}
ok($pgbench->finish, 'the producers ran throughout, no transaction failed')
  or diag(${ $pgbench->{outbox_err} });
my $produced = $node->safe_psql('postgres', 'SELECT count(*) FROM produced');
cmp_ok($produced, '>=', 300 * 28 * 0.9, "the producers kept their rate: $produced messages");

my $t0 = time;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 120),
    'everything is delivered');
diag(sprintf('queue empty %.1f s after the errors stopped', time - $t0));
my $s = stats_row($node, 'errs');
is($s->{dead}, 0, 'nothing dead-lettered')
  or diag($node->safe_psql('postgres',
    'SELECT reason, attempts, last_error, count(*) FROM outbox.dead_letters GROUP BY 1, 2, 3'));

# An attempt is spent on the broker's error, or on a report librdkafka could not confirm
# (POSSIBLY_PERSISTED: after a failed request of the idempotent producer), which outbox rightly
# sends again rather than counting as delivered.
like($s->{last_error} // '', qr/NOT_ENOUGH_REPLICAS|REQUEST_TIMED_OUT|POSSIBLY_PERSISTED/,
    'stats().last_error says why attempts were spent');
diag("stats: delivered_total $s->{delivered_total}, failed_total $s->{failed_total}, "
      . "deferred_total $s->{deferred_total}; highest attempts count seen on a queued row: "
      . $max_attempts_seen);

my @produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM produced');
my $received = kafka_event_ids($broker, 'errs');
fault_summary('produce_errors', produced => \@produced, received => $received);

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
