# Operations: outbox.stats() tells the truth during a drain, after dead-lettering, expiry and
# retries, and after a restart; the conservation check balances exactly; dead letters are
# purged on request; delivered messages are archived and swept under outbox.retention.
use strict;
use warnings;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $sink = webhook_sink();
my $node = outbox_node('ops', conf => "outbox.retry_base = '20ms'\noutbox.retry_max = '100ms'");
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "ops"}');
    SELECT outbox.create_destination('flaky', 'webhook', '{"url": "@{[ $sink->url('/f;fail_first=1') ]}"}');
    SELECT outbox.create_destination('gone', 'webhook', '{"url": "@{[ $sink->url('/g;status=404') ]}"}');
});
sub sql { return $node->safe_psql('postgres', $_[0]); }

# 1. During a drain of 20,000: the gauges add up to what is queued and fall to zero.
sql(q{SELECT outbox.pause('k');
      INSERT INTO outbox.messages (destination, payload) SELECT 'k', jsonb_build_object('n', g) FROM generate_series(1, 20000) g});
my $s = stats_row($node, 'k');
is($s->{pending}, 20000, 'paused: 20,000 pending');
ok(defined $s->{oldest_pending_age}, 'oldest_pending_age is set');
sql(q{SELECT outbox.resume('k')});
my ($samples, $bad) = (0, 0);
my $last = 20000;
while (queued($node) ne '0') {
    my $r = stats_row($node, 'k');
    my $gauges = $r->{pending} + $r->{in_flight} + $r->{retrying} + $r->{scheduled};
    $bad++ if $gauges > $last || $gauges < 0;   # never grows during a drain, never negative
    $last = $gauges;
    $samples++;
    sleep 0.02;   # the sampling's pace
}
$s = stats_row($node, 'k');
is($bad, 0, "during the drain the gauges only fell ($samples samples)");
is($s->{pending} + $s->{in_flight} + $s->{retrying}, 0, 'after it, nothing pending or in flight');
is($s->{delivered_total}, 20000, 'delivered_total counts 20,000');
ok(!defined $s->{oldest_pending_age}, 'and oldest_pending_age is empty: idle, not stalled');

# 2. Dead letters, retries and expiry.
sql(q{INSERT INTO outbox.messages (destination, payload) SELECT 'gone', jsonb_build_object('n', g) FROM generate_series(1, 7) g;
      INSERT INTO outbox.messages (destination, payload) SELECT 'flaky', jsonb_build_object('n', g) FROM generate_series(1, 30) g;
      SELECT outbox.pause('k');
      INSERT INTO outbox.messages (destination, payload, expires_at) SELECT 'k', '{}', now() + interval '1 second' FROM generate_series(1, 5)});
# Expiry goes by the clock: until the paused messages are past their expires_at.
ok(wait_until(sub { sql(q{SELECT now() > max(expires_at) FROM outbox.messages WHERE destination = 'k'}) eq 't' }, 10),
    'the paused messages are past their expires_at');
sql(q{SELECT outbox.resume('k')});
ok(wait_until(sub { queued($node) eq '0' }, 30), 'everything resolved');
$s = stats_row($node, 'gone');
is($s->{dead}, 7, 'gone: 7 dead letters');
is($s->{dead_lettered_total}, 7, 'gone: dead_lettered_total 7');
like($s->{last_error}, qr/^HTTP 404/, 'gone: last_error says why');
$s = stats_row($node, 'flaky');
is($s->{failed_total}, 30, 'flaky: 30 failed attempts');
is($s->{delivered_total}, 30, 'flaky: 30 delivered on the retry');
$s = stats_row($node, 'k');
is($s->{expired_total}, 5, 'k: 5 expired');
is(sql(q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'k' AND reason = 'expired'}), '5',
    'the expired messages are in the dead letters, reason expired');

# 3. Conservation: every message accounted for, exactly.
is(sql(q{SELECT string_agg(destination || '=' || balance, ',' ORDER BY destination) FROM outbox.conservation()}),
    'flaky=0,gone=0,k=0', 'initial + produced = delivered + dead-lettered + expired + removed + queued');
is(sql(q{SELECT initial + produced FROM outbox.conservation() WHERE destination = 'k'}), '20005',
    'k: 20,005 counted in (the 20,000 queued when the counts started, then 5)');

# 4. The gauges stay exact on a backlog, and stats() is fast on it.
sql(q{SELECT outbox.pause('k');
      INSERT INTO outbox.messages (destination, payload) SELECT 'k', '{}' FROM generate_series(1, 100000)});
my $t0 = time;
$s = stats_row($node, 'k');
my $took = time - $t0;
is($s->{pending}, 100000, '100,000 pending');
$t0 = time;
stats_row($node, 'k') for 1 .. 10;
my $avg_ms = (time - $t0) * 100;
# How fast is the benchmarks' business (test/bench/run --only stats), not a timed test's.
diag(sprintf('stats() on a 100,000-row backlog: %.1f ms per call (psql round trip included)', $avg_ms));

# 5. After a restart the counters start again and the gauges are still right.
my $reset = stats_row($node, 'k')->{stats_reset};
$node->restart;
$s = stats_row($node, 'k');
is($s->{delivered_total}, 0, 'after a restart delivered_total starts from 0');
isnt($s->{stats_reset}, $reset, 'and stats_reset moved');
is($s->{pending}, 100000, 'the queue is counted again: 100,000 pending');
is(sql(q{SELECT initial || '/' || balance FROM outbox.conservation() WHERE destination = 'k'}), '100000/0',
    'the conservation check starts from the counted queue');
sql(q{SELECT outbox.resume('k')});
ok(wait_until(sub { queued($node) eq '0' }, 60), 'the backlog drains');
is(sql(q{SELECT balance FROM outbox.conservation() WHERE destination = 'k'}), '0', 'and balances');

# 6. Dead letters go only when asked.
is(sql(q{SELECT outbox.purge_dead_letters(interval '1 hour')}), '0', 'nothing older than an hour');
is(sql(q{SELECT outbox.purge_dead_letters(interval '0', 'gone')}), '7', 'purge by destination');
is(sql(q{SELECT count(*) FROM outbox.dead_letters}), '5', 'the others stay');
my ($ret, $out, $err) = $node->psql('postgres', q{SELECT outbox.purge_dead_letters(interval '-1 day')});
like($err, qr/needs an age of zero or more/, 'a negative age is refused');

# 7. Retention: delivered messages are archived, then swept.
$node->append_conf('postgresql.conf', "outbox.retention = '3s'\n");
ok(reload_and_wait($node, 'outbox.retention', '3s'), 'the worker has read retention 3s');
sql(q{INSERT INTO outbox.messages (destination, payload) SELECT 'k', jsonb_build_object('n', g) FROM generate_series(1, 2500) g});
ok(wait_until(sub { sql('SELECT count(*) FROM outbox.archive') eq '2500' }, 30), 'with retention, delivered messages are archived');
is(sql(q{SELECT count(*) FROM outbox.archive WHERE attempts = 1 AND delivered_at IS NOT NULL}), '2500',
    'with their attempts and delivery time');
ok(wait_until(sub { sql('SELECT count(*) FROM outbox.archive') eq '0' }, 30), 'and swept once older than the retention');
is(sql(q{SELECT count(*) FROM outbox.dead_letters}), '5', 'dead letters are never swept');

# 8. outbox.workers() shows the worker. (On an empty queue it is idle but for its polls, which
# claim: one CI run read "claiming" there; asked again until it reads idle.)
ok(wait_until(sub { sql(q{SELECT state || ':' || (delivered > 0)::int FROM outbox.workers()}) eq 'idle:1' }, 10),
    'outbox.workers() shows the worker, idle, and what it delivered');

# 9. Producers of a paused destination do not wake the worker (it would wake for each commit
# and find nothing to claim); outbox.resume wakes it, and what was queued goes at once.
# Measured as the worker's voluntary context switches over 1,000 one-row transactions (each
# wake is one; its own polls add about one a second).
sub worker_switches {
    my $pid = sql(q{SELECT pid FROM outbox.workers() WHERE database = 'postgres'});
    return PostgreSQL::Test::Utils::slurp_file("/proc/$pid/status") =~ /^voluntary_ctxt_switches:\s+(\d+)/m
      ? $1 : die "no context switches for worker $pid";
}
sql(q{SELECT outbox.pause('k')});
my $switches = worker_switches();
$t0 = time;
sql(join("\n", map { "INSERT INTO outbox.messages (destination, payload) VALUES ('k', '{\"p\": $_}');" } 1 .. 1000));
my $woken = worker_switches() - $switches;
$took = time - $t0;
diag(sprintf('1,000 commits to a paused destination in %.1f s: the worker switched %d times', $took, $woken));
cmp_ok($woken, '<', 50 + 5 * $took, 'producers of a paused destination do not wake the worker');
is(queued($node), '1000', 'the 1,000 wait while it is paused');
$t0 = time;
sql(q{SELECT outbox.resume('k')});
ok(wait_until(sub { queued($node) eq '0' }, 10), 'outbox.resume wakes the worker: they go');
diag(sprintf('delivered %.2f s after the resume', time - $t0));

$node->stop;
check_server_log($node);
$broker->stop;
$sink->stop;
done_testing();
