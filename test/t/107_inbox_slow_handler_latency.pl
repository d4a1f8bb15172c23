# Inbox handlers run apart from delivery (issue 35): a subscription handler that sleeps 15 s
# (handler_timeout 30 s) does not delay another destination. Its commit-to-broker latency at
# 1,000 msg/s (p99) while the handler sleeps stays within 1.2x (or 100 ms) of the runs before
# and after; the handler's record is applied once it returns.
# outbox-tap: alone -- compares p99 latencies (within 1.2x)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl("create $_ 1") for qw(slow plain);
my $node = outbox_node('slow_handler');
$node->safe_psql('postgres', qq{
    CREATE TABLE slow_seen (n int);
    CREATE FUNCTION slow_apply(m outbox.inbox_message) RETURNS void LANGUAGE plpgsql AS \$\$
    BEGIN
        INSERT INTO public.slow_seen VALUES ((m.payload->>'n')::int);
        PERFORM pg_sleep(15);
    END \$\$;
    SELECT outbox.create_subscription('slow_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["slow"], "batch_size": 1, "handler_timeout": "30s"}',
        'slow_apply(outbox.inbox_message)');
    SELECT outbox.create_destination('slow', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "slow"}');
    SELECT outbox.create_destination('plain', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "plain"}');
});

# p99 of (the time a live consumer received each record - the producer's clock at INSERT), in
# ms, for 6 s of single-row transactions at 1,000 per second. Each run starts once the
# consumer has received a marker sent through the relay (the pipeline is live).
my $receiver = kafka_receiver($broker, 'plain');
my $run = 0;
my $p99 = sub {
    my $phase = ++$run;
    $node->safe_psql('postgres', qq{
        INSERT INTO outbox.messages (destination, payload) VALUES ('plain', '{"marker": $phase}')});
    wait_until(sub { grep { /"marker": $phase\b/ } @{ $receiver->lines } }, 60)
      or die "run $phase: the marker did not arrive";
    my $h = start_pgbench($node, clients => 4, threads => 2, rate => 1000, seconds => 6, script => qq{
INSERT INTO outbox.messages (destination, payload)
VALUES ('plain', jsonb_build_object('run', $phase, 't', extract(epoch from clock_timestamp()) * 1000));
});
    $h->finish;
    wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'plain'}) eq '0' }, 60)
      or die 'plain did not drain';
    # Everything the relay delivered (the broker's end offset) has reached the consumer.
    my $end = $broker->end_offset_sum('plain', 1);
    wait_until(sub { @{ $receiver->lines } >= $end }, 60) or die "run $phase: the consumer lags";
    # (jsonb prints its keys shortest first: {"t": ..., "run": N})
    my @lat = sort { $a <=> $b }
      map { /^([\d.]+) / && /"run": $phase\b/ && /"t": ([\d.]+)/ ? (split / /)[0] - $1 : () }
      @{ $receiver->lines };
    die "run $phase: no records" unless @lat;
    return ($lat[int(0.99 * $#lat)], scalar(@lat));
};
my ($before, $n_before) = $p99->();
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload) VALUES ('slow', '{"n": 1}')});
ok(wait_until(sub { $node->safe_psql('postgres', q{
        SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox inbox worker' AND wait_event = 'PgSleep'}) eq '1' }, 30),
    'the 15 s handler is running');
my $slow_start = time;
my ($during, $n_during) = $p99->();
my $overlap = time - $slow_start;
my ($after, $n_after) = $p99->();
diag(sprintf('p99 commit-to-broker latency at 1,000 msg/s: %.1f ms (%d records) before, %.1f ms (%d) '
    . 'while a handler slept 15 s, %.1f ms (%d) after', $before, $n_before, $during, $n_during, $after, $n_after));
cmp_ok($overlap, '<', 15, 'the run with the handler fitted inside its 15 s');
my $baseline = $before > $after ? $before : $after;
# 1.2x, or 100 ms more where that is wider: CI runs another major's files beside this one, and
# that alone moved a phase's p99 from 57 to 112 ms once. A handler that held up delivery would
# add seconds (the 15 s sleep), which either bound catches.
my $bound = 1.2 * $baseline > $baseline + 100 ? 1.2 * $baseline : $baseline + 100;
cmp_ok($during, '<=', $bound,
    'the slow handler leaves the p99 within 1.2x (or 100 ms) of the runs without it');
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM slow_seen}) eq '1' }, 30),
    'the slow handler finished within its 30 s and its record was applied');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
