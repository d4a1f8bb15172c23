# Fault: the server is stopped in immediate mode (a crash: no shutdown, no hand-back) at three
# precise points of a delivery cycle, chosen with the test-only outbox.debug_pause:
#   claim       rows leased, the claim transaction not yet committed;
#   publish     the claim committed, the batch handed to librdkafka, no outcome recorded;
#   write-back  outcomes written, the write-back transaction not yet committed.
# For each, after one warm-up message, 3,000 messages are queued (destination paused, then resumed), the test waits for
# the worker's "pausing N ms in phase" log line, stops the server immediately, restarts it with
# the pause off and checks that every event_id arrives (kcat, ce_id header). Measured: what the
# broker already had when the server stopped, how long the recovery took (lease lapse
# included), and the duplicates.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
# A short lease, so rows leased by the stopped server are taken over within seconds.
my $node = outbox_node('istop', test_switches => 1, conf => join("\n", 'log_statement = none',
    "outbox.lease_timeout = '4s'", 'outbox.batch_size = 500'));
$node->safe_psql('postgres', 'CREATE TABLE produced (phase text, event_id uuid PRIMARY KEY)');

my $n_messages = 3000;
for my $phase ('claim', 'publish', 'write-back') {
    (my $dest = "istop_$phase") =~ s/-/_/g;
    $node->safe_psql('postgres', qq{
        SELECT outbox.create_destination('$dest', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "$dest"}');
        WITH m AS (
            INSERT INTO outbox.messages (destination, key, payload) VALUES ('$dest', 'warm-up', '{}')
            RETURNING event_id)
        INSERT INTO produced SELECT '$phase', event_id FROM m;
    });
    # Warm up: the destination's producer is connected and knows the topic, so that a batch
    # handed to it is really sent while the worker is paused.
    ok(wait_until(sub { $broker->end_offset_sum($dest) == 1 }, 30), "$phase: warm-up delivered");
    $node->safe_psql('postgres', qq{
        SELECT outbox.pause('$dest');
        WITH m AS (
            INSERT INTO outbox.messages (destination, key, payload)
            SELECT '$dest', 'k' || g, jsonb_build_object('n', g) FROM generate_series(1, $n_messages) g
            RETURNING event_id)
        INSERT INTO produced SELECT '$phase', event_id FROM m;
    });
    $node->append_conf('postgresql.conf',
        "outbox.debug_pause = '$phase'\noutbox.debug_pause_ms = 60000\n");
    ok(reload_and_wait($node, 'outbox.debug_pause', $phase), "$phase: the worker has read the new settings");
    my $offset = -s $node->logfile;
    $node->safe_psql('postgres', "SELECT outbox.resume('$dest')");
    ok($node->wait_for_log(qr/outbox: pausing 60000 ms in phase "\Q$phase\E"/, $offset),
        "$phase: the worker paused in phase $phase");
    # publish: librdkafka sends the batch on its own threads while the worker sleeps; the
    # server is stopped once the broker has it, before any outcome is recorded.
    ok(wait_until(sub { $broker->end_offset_sum($dest) >= 501 }, 10),
        'publish: the broker received the paused batch') if $phase eq 'publish';
    my $before = $broker->end_offset_sum($dest) - 1;
    my $leased = $node->safe_psql('postgres',
        "SELECT count(*) FROM outbox.messages WHERE destination = '$dest' AND lease_token IS NOT NULL");
    $node->stop('immediate');
    my $t0 = time;
    diag("$phase: stopped in immediate mode; the broker had $before messages of this batch, "
          . "$leased rows were leased (committed) at the time");
    if ($phase eq 'claim') {
        is($before, 0, 'claim: nothing was published before the claim committed');
        is($leased, 0, 'claim: and no lease was visible (the claim transaction was open)');
    } elsif ($phase eq 'publish') {
        is($leased, 500, 'publish: the claim had committed its leases (one batch)');
    } else {
        cmp_ok($before, '>', 0, 'write-back: the first batch had been acknowledged');
    }

    $node->append_conf('postgresql.conf', "outbox.debug_pause = ''\n");
    $node->start;
    ok(wait_until(sub {
        $node->safe_psql('postgres', "SELECT count(*) FROM outbox.messages WHERE destination = '$dest'") eq '0' }, 90),
        "$phase: all delivered after the restart");
    diag(sprintf('%s: queue empty %.1f s after the restart', $phase, time - $t0));
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
        '0', "$phase: nothing dead-lettered");
    my @produced = split /\n/,
      $node->safe_psql('postgres', "SELECT event_id FROM produced WHERE phase = '$phase'");
    is(scalar(@produced), $n_messages + 1, "$phase: $n_messages messages (and the warm-up) were committed");
    fault_summary("immediate_stop_$phase", produced => \@produced,
        received => kafka_event_ids($broker, $dest));
}

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
