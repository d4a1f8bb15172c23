# Fault: a flapping broker. Producers commit ~300 messages/s steadily while the Kafka broker
# goes down for 2 s and up for 2 s, over and over for 30 s (connections dropped with produce
# requests in flight, reconnects, purges of what librdkafka holds). Measured: every committed
# event_id arrives (kcat, ce_id header), nothing is dead-lettered although max_attempts is only
# 3 (an outage must not spend attempts), how many were deferred or retried, the duplicates (the
# mock broker does not de-duplicate a batch re-sent after a dropped connection), the queue every
# 0.5 s and the longest stretch without any delivery (the outage probe backs off 1 s doubling to
# 30 s, and a probe that lands in a down phase doubles it), and how often the server log says
# "handing back the messages in flight".
# outbox-tap: alone -- asserts the producers' rate and how soon delivery resumes
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
# A short lease: librdkafka's message.timeout.ms is kept below half of it, so messages stuck
# behind a downed broker are handed back (deferred) within the flapping period too.
my $node = outbox_node('flap', conf => join("\n", 'log_statement = none',
    "outbox.lease_timeout = '6s'", 'outbox.max_attempts = 3', "outbox.retry_base = '100ms'"));
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('flap', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "flap"}');
    CREATE TABLE produced (event_id uuid PRIMARY KEY);
    CREATE SEQUENCE n_seq;
});

# Warm up: the producer has connected and knows the topic before the faults start.
$node->safe_psql('postgres', q{
    WITH m AS (INSERT INTO outbox.messages (destination, key, payload) VALUES ('flap', 'warm-up', '{}')
               RETURNING event_id)
    INSERT INTO produced SELECT event_id FROM m});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'warm-up message delivered');

# ~300 msg/s for 38 s: 4 s before the flapping, 30 s of it, 4 s after. Each transaction records
# the event_id it committed in a side table.
my $pgbench = start_pgbench($node, clients => 2, rate => 300, seconds => 38,
    script => recorded_insert('flap'));
sleep 4;   # the schedule of the 38 s above: 4 s of steady production first
my $start = time;
my ($cycles, $max_pending) = (0, 0);
# Every 0.5 s: the broker's state, pending and delivered_total; the longest stretch without a
# single delivery, and how much of it the broker was up.
my (@timeline, @samples);
my $phase = sub {   # 2 s in one state, sampled every 0.5 s
    my ($up) = @_;
    my $end = time + 2;
    while (time < $end) {
        my $s = stats_row($node, 'flap');
        $max_pending = $s->{pending} if $s->{pending} > $max_pending;
        push @timeline, ($up ? '^' : 'v') . $s->{pending};
        push @samples, [ time, $up, $s->{delivered_total} ];
        my $left = $end - time;
        sleep($left < 0.5 ? $left : 0.5) if $left > 0;   # the sampling's pace
    }
};
while (time - $start < 30) {
    $broker->down;
    $phase->(0);
    $broker->up;
    $cycles++;
    $phase->(1);
}
my ($stall, $stall_up, $run_start, $run_up) = (0, 0, undef, 0);
for my $i (1 .. $#samples) {
    if ($samples[$i][2] == $samples[$i - 1][2]) {
        $run_start //= $samples[$i - 1][0];
        $run_up += ($samples[$i][0] - $samples[$i - 1][0]) if $samples[$i - 1][1];
        if ($samples[$i][0] - $run_start > $stall) {
            ($stall, $stall_up) = ($samples[$i][0] - $run_start, $run_up);
        }
    } else {
        ($run_start, $run_up) = (undef, 0);
    }
}
diag('pending every 0.5 s (v: broker down, ^: up): ' . join(' ', @timeline));
diag(sprintf('broker flapped %d times (2 s down, 2 s up) over %.1f s; max pending %d; '
      . 'longest stretch without a delivery %.1f s, the broker up for %.1f s of it',
    $cycles, time - $start, $max_pending, $stall, $stall_up));
# A held probe goes out the moment librdkafka reconnects (reconnect.backoff.max.ms 1 s): the
# broker is never up for long without a delivery.
cmp_ok($stall_up, '<', 3, 'delivery resumes within a few seconds of the broker coming back');
ok($pgbench->finish, 'the producers ran throughout, no transaction failed')
  or diag(${ $pgbench->{outbox_err} });
my $produced = $node->safe_psql('postgres', 'SELECT count(*) FROM produced');
cmp_ok($produced, '>=', 300 * 38 * 0.9, "the producers kept their rate: $produced messages");

my $t0 = time;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 120),
    'everything is delivered once the broker stays up');
diag(sprintf('queue empty %.1f s after the last flap', time - $t0));

my $s = stats_row($node, 'flap');
is($s->{dead}, 0, 'nothing dead-lettered (max_attempts is 3)')
  or diag($node->safe_psql('postgres',
    'SELECT reason, attempts, last_error, count(*) FROM outbox.dead_letters GROUP BY 1, 2, 3'));
diag("stats: delivered_total $s->{delivered_total}, failed_total $s->{failed_total}, "
      . "deferred_total $s->{deferred_total}, last_error " . ($s->{last_error} // 'none'));
cmp_ok($s->{deferred_total}, '>', 0, 'messages were deferred (handed back, no attempt spent)');

my @produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM produced');
my $received = kafka_event_ids($broker, 'flap');
fault_summary('broker_flapping', produced => \@produced, received => $received);

$node->stop;
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
my $handbacks = () = $log =~ /handing back the messages in flight/g;
diag("server log: $handbacks lines 'handing back the messages in flight', "
      . length($log) . ' bytes in all');
cmp_ok($handbacks, '<=', 2 * $cycles + 2, 'at most a hand-back or two logged per outage');
check_server_log($node);
$broker->stop;
done_testing();
