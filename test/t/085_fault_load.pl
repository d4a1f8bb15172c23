# Fault: sustained overload from the producers' side. 16 concurrent producer sessions
# (pgbench -c 16, no rate limit) commit as fast as they can, durably, for 40 s (60 s with
# OUTBOX_TEST_FULL=1: the checks compare the last 20 s with what came before); every
# transaction puts one message to Kafka (the fast path) and 2% of them one more to a webhook
# destination (the Python sink takes ~2,500 requests/s at best, less with 16 producers on the
# same cores), recording the event_ids in a side table in the same transaction. Measured every
# second: the queue length (count(*) of outbox.messages); at the start and at the end, the
# worker's memory (/proc/PID/status). Asserted: the backlog stays bounded (it does not keep
# growing over the last 20 s), the worker's memory stays flat, and nothing is lost (kcat reads
# every ce_id of a 64-partition topic, below the mock broker's 5 MB per partition retention;
# the sink's log for the webhook).
# outbox-tap: alone, loads -- sustained load with bounds on the queue and the worker's memory
use strict;
use warnings;
use List::Util qw(max);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $sink = webhook_sink();
my $hook_url = $sink->url('/load');
# fsync = on (the test framework turns it off): the producers commit durably, as in
# production, so their "highest rate" is what a durable server reaches. With fsync = off the 16
# producer backends are CPU-bound, and on 2 cores the one worker, which gets its fair share of
# the CPU (~1/17), falls behind: the backlog then grows by ~1,500 messages/s for as long as the
# producers run (it drains at ~16,000/s once they stop).
# shared_buffers is kept small so that the shared memory a process maps as it touches buffers
# (counted in VmRSS) cannot pass for growth of the worker's own memory.
my $node = outbox_node('load', conf => join("\n", 'log_statement = none', 'fsync = on',
    'shared_buffers = 32MB', 'max_connections = 40'));
$broker->ctl('create load 64');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('load_kafka', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "load"}');
    SELECT outbox.create_destination('load_hook', 'webhook', '{"url": "$hook_url"}');
    CREATE UNLOGGED TABLE produced (destination text, event_id uuid);
    CREATE SEQUENCE n_seq;
});
my $produce = q{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT d, 'k' || n, jsonb_build_object('n', n)
      FROM (SELECT nextval('n_seq') AS n) s,
           LATERAL (SELECT 'load_kafka' AS d UNION ALL SELECT 'load_hook' WHERE random() < 0.02) ds
    RETURNING destination, event_id)
INSERT INTO produced SELECT destination, event_id FROM m;
};
# Warm up both destinations (drivers built, connections open).
$node->safe_psql('postgres', $produce) for 1 .. 60;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'warm-up delivered');

my ($worker) = worker_pids($node);
sub memory {   # kB
    my %m;
    open my $fh, '<', "/proc/$worker/status" or return {};
    while (<$fh>) { $m{$1} = $2 if /^(VmRSS|RssAnon|RssFile|RssShmem):\s+(\d+) kB/; }
    close $fh;
    return \%m;
}
my $mem0 = memory();

my $seconds = ($ENV{OUTBOX_TEST_FULL} // '') eq '1' ? 60 : 40;
my $pgbench = start_pgbench($node, clients => 16, threads => 2, seconds => $seconds, script => $produce);
my $start = time;
my (@queue, $mem_start);
while (time - $start < $seconds + 0.5 && $pgbench->pumpable) {
    my $t = time;
    my $q = eval { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') };
    push @queue, $q // -1;
    $mem_start = memory() if @queue == 5;   # steady state: drivers and buffers in use
    $pgbench->pump_nb;
    sleep(max(0, 1 - (time - $t)));   # one sample a second
}
ok($pgbench->finish, "pgbench ran for $seconds s without errors") or diag(${ $pgbench->{outbox_err} });
my ($tps) = ${ $pgbench->{outbox_out} } =~ /tps = ([\d.]+)/;
my $produced_n = $node->safe_psql('postgres', 'SELECT count(*) FROM produced');
diag(sprintf('%d messages committed by 16 producers in %d s (%.0f tps, %.0f msg/s)',
    $produced_n, $seconds, $tps // 0, $produced_n / $seconds));
diag('queue length every second: ' . join(' ', @queue));

my $peak = max(@queue);
my @first = @queue[0 .. $#queue - 20];
my @last = @queue[$#queue - 19 .. $#queue];
my $bound = max(2000, 1.5 * max(@first));
diag(sprintf('backlog: max %d; max over the first %d s %d; max over the last 20 s %d; last %d',
    $peak, scalar(@first), max(@first), max(@last), $queue[-1]));
cmp_ok(scalar(@queue), '>=', $seconds - 5, 'the queue was sampled every second');
cmp_ok(max(@last), '<=', $bound,
    'the backlog does not keep growing: the last 20 s stay within 1.5x the earlier peak (or 2,000)');

my $t0 = time;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 120),
    'everything is delivered after the load');
diag(sprintf('queue empty %.1f s after the producers stopped', time - $t0));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

my $mem_end = memory();
is(join(',', worker_pids($node)), $worker, 'the same worker ran throughout');
my $growth = ($mem_end->{VmRSS} - $mem_start->{VmRSS}) / 1024;
my $private = ($mem_end->{RssAnon} - $mem_start->{RssAnon}) / 1024;
diag(sprintf('worker %d memory (MB) before the load / after 5 s / at the end: VmRSS %.1f / %.1f / %.1f, '
      . 'RssAnon %.1f / %.1f / %.1f, RssShmem %.1f / %.1f / %.1f',
    $worker, map { $_ / 1024 } map { my $k = $_; ($mem0->{$k}, $mem_start->{$k}, $mem_end->{$k}) }
      qw(VmRSS RssAnon RssShmem)));
cmp_ok($growth, '<', 50, sprintf('worker VmRSS grew by %.1f MB (< 50 MB) from 5 s into the load to the end', $growth));
cmp_ok($private, '<', 50, sprintf('its private memory (RssAnon) grew by %.1f MB (< 50 MB)', $private));

my %by_dest;
for (split /\n/, $node->safe_psql('postgres', 'SELECT destination, event_id FROM produced')) {
    my ($d, $e) = split /\|/;
    push @{ $by_dest{$d} }, $e;
}
my $kafka = kafka_event_ids($broker, 'load');
diag(sprintf('end offsets of topic load: %d; kcat read %d', $broker->end_offset_sum('load', 64), scalar(@$kafka)));
fault_summary('load_kafka', produced => $by_dest{load_kafka}, received => $kafka);
fault_summary('load_webhook', produced => $by_dest{load_hook}, received => sink_event_ids($sink, qr{^/load$}));

$node->stop;
check_server_log($node);
$broker->stop;
$sink->stop;
done_testing();
