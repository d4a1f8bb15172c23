# Fault: poison messages.
# (a) A message whose delivery always fails (webhook answering 500; max_attempts 3, retry_base
#     50ms) is retried and dead-lettered after exactly 3 attempts with reason max_attempts,
#     while 1,000 messages to a second webhook destination flow as fast as without it: their
#     delivery time (commit to the last arrival, by the sink's clock) is measured without and
#     with the poison present.
# (b) A message that kills the worker whenever it holds it: with outbox.debug_pause = 'publish'
#     the worker pauses after handing the claimed message to the driver, and the test kills it
#     with SIGKILL each time (restart_after_crash = on, so the postmaster restarts everything).
#     With max_attempts 3, after 3 claims without an outcome the next claim must bury it as
#     `poison` instead of publishing it, and the worker then delivers other messages normally.
#     b1 kills once the claim's commit has been written to the WAL; b2 kills at once, as a
#     crash caused by the message itself would (the worker commits asynchronously, and a
#     crash-restart replays only the WAL that was written).
# outbox-tap: alone -- compares two delivery times (at most 2x + 0.5 s)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $node = outbox_node('poison', test_switches => 1, conf => join("\n", 'log_statement = none',
    'restart_after_crash = on', "outbox.lease_timeout = '2s'"));
$node->safe_psql('postgres', 'CREATE TABLE produced (part text, event_id uuid PRIMARY KEY)');

# Inserts $n messages to $dest, records their event_ids as part $part; returns them.
sub produce_part {
    my ($part, $dest, $n) = @_;
    return @{ produce($node, $dest, 1, $n, record => "produced SELECT '$part', event_id") };
}

#-------------------------------------------------------------------------------------------
# (a) A message that always fails, next to a destination that flows.
#-------------------------------------------------------------------------------------------
$sink->create_destination($node, 'poison_hook', '/poison;status=500', max_attempts => 3, retry_base => '50ms', retry_max => '200ms');
$sink->create_destination($node, 'flow_hook', '/flow');

# The time from just before the commit of $n flow messages to the arrival of the last of them.
sub flow_time {
    my ($label, $n) = @_;
    my $before = scalar(@{ $sink->requests_for(qr{^/flow$}) });
    my $t0 = time;
    my @ids = produce_part('a', 'flow_hook', $n);
    wait_until(sub { scalar(@{ $sink->requests_for(qr{^/flow$}) }) >= $before + $n }, 60)
      or return (undef, @ids);
    my ($last) = sort { $b <=> $a } map { $_->{t} } @{ $sink->requests_for(qr{^/flow$}) };
    return ($last - $t0, @ids);
}
produce_part('a', 'flow_hook', 10);   # warm-up: the connection to the sink is open
ok(wait_until(sub { queued($node, 'flow_hook', restarting => 1) == 0 }, 30), 'warm-up delivered');
my ($baseline, @flow_ids) = flow_time('baseline', 1000);
ok(defined $baseline, 'without a poison message: 1,000 flow messages delivered');

# The poison message, and 1,000 flow messages right behind it.
my ($poison_a) = produce_part('a', 'poison_hook', 1);
ok(wait_until(sub { scalar(@{ $sink->requests_for(qr{^/poison}) }) >= 1 }, 10), 'the poison message is failing');
my ($with_poison, @more_ids) = flow_time('with poison', 1000);
push @flow_ids, @more_ids;
ok(defined $with_poison, 'with a poison message failing: 1,000 flow messages delivered');
diag(sprintf('1,000 flow messages delivered in %.3f s without the poison message, %.3f s with it',
    $baseline, $with_poison // -1));
cmp_ok($with_poison // 1e9, '<=', 2 * $baseline + 0.5,
    'the poison message does not slow the other destination down (at most 2x + 0.5 s)');

ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq '1' }, 30),
    'the poison message is dead-lettered');
is($node->safe_psql('postgres', qq{SELECT reason || '|' || attempts FROM outbox.dead_letters WHERE event_id = '$poison_a'}),
    'max_attempts|3', 'with reason max_attempts after 3 attempts');
like($node->safe_psql('postgres', qq{SELECT last_error FROM outbox.dead_letters WHERE event_id = '$poison_a'}),
    qr/HTTP 500/, 'last_error has the HTTP status');
my @poison_reqs = grep { $_->{headers}{'webhook-id'} eq $poison_a } @{ $sink->requests_for(qr{^/poison}) };
is(scalar(@poison_reqs), 3, 'the endpoint saw exactly 3 attempts');
my @a_produced = split /\n/, $node->safe_psql('postgres', q{SELECT event_id FROM produced WHERE part = 'a'});
fault_summary('poison_max_attempts', produced => \@a_produced,
    received => [ @{ sink_event_ids($sink, qr{^/(flow|poison)}) } ], dead => [$poison_a]);

#-------------------------------------------------------------------------------------------
# (b) A message that kills the worker every time it holds it.
#-------------------------------------------------------------------------------------------
# Queues one message and kills the worker each of the 3 (max_attempts) times it pauses holding
# it (the only message queued), taking the worker's pid from the log line. $durable: first
# wait until the claim's commit record has been written to the WAL (the worker commits
# asynchronously; a crash-restart replays only the WAL that was written); otherwise kill at
# once. Then the pause is switched off: the 4th claim must bury the message. Returns its
# event_id and, per kill, the attempts count the claim had committed (durable only).
my $total_kills = 0;
sub kill_while_held {
    my ($durable) = @_;
    $node->append_conf('postgresql.conf',
        "outbox.debug_pause = 'publish'\noutbox.debug_pause_ms = 20000\n");
    ok(reload_and_wait($node, 'outbox.debug_pause', 'publish'), 'the worker has read the setting');
    my $offset = -s $node->logfile;
    my ($event_id) = produce_part('b', 'crashy', 1);
    my @seen;
    for my $kill (1 .. 3) {
        # Logged after the claim committed and the message went to the driver.
        my ($pid, $deadline) = (undef, time + 30);
        while (!$pid && time < $deadline) {
            my $log = slurp_file($node->logfile, $offset);
            if ($log =~ /\[(\d+)\] LOG:  outbox: pausing 20000 ms in phase "publish"[^\n]*\n/g) {
                $pid = $1;
                $offset += pos($log);
            } else {
                sleep 0.01;   # the loop's pace
            }
        }
        ok($pid, "the worker paused holding the message (claim $kill)") or last;
        if ($durable) {
            my ($attempts, $insert) = split /\|/, $node->safe_psql('postgres',
                "SELECT attempts, pg_current_wal_insert_lsn() FROM outbox.messages WHERE event_id = '$event_id'");
            wait_until(sub {
                $node->safe_psql('postgres', "SELECT pg_current_wal_lsn() >= '$insert'") eq 't' }, 10);
            push @seen, $attempts;
        }
        ok(kill('KILL', $pid), "worker $pid killed with SIGKILL (claim $kill)");
        $total_kills++;
    }
    # Off before the restarted worker's next claim (the killed claim's lease lasts 2 s).
    $node->append_conf('postgresql.conf', "outbox.debug_pause = ''\n");
    $node->reload;
    wait_until(sub { defined eval { $node->safe_psql('postgres', 'SELECT 1') } }, 60);
    return ($event_id, @seen);
}
sub dead_reason {
    my ($event_id) = @_;
    my $r = eval { $node->safe_psql('postgres',
        qq{SELECT reason || '|' || attempts FROM outbox.dead_letters WHERE event_id = '$event_id'}) };
    return $r // '';
}
sub delivered_times {
    my ($event_id) = @_;
    return scalar(grep { $_->{headers}{'webhook-id'} eq $event_id } @{ $sink->requests_for(qr{^/crashy}) });
}

$sink->create_destination($node, 'crashy', '/crashy', max_attempts => 3);

# (b1) Each kill comes after the claim reached the WAL: the poison logic itself.
my ($poison_b, @seen) = kill_while_held(1);
diag("b1: attempts committed by the claims that were killed: @seen");
is("@seen", '1 2 3', 'b1: each claim counted one attempt');
ok(wait_until(sub { dead_reason($poison_b) ne '' || queued($node, 'crashy', restarting => 1) == 0 }, 30),
    'b1: the message is dead-lettered or delivered');
is(dead_reason($poison_b), 'poison|3', 'b1: dead-lettered as poison, 3 attempts counted');
like($node->safe_psql('postgres', qq{SELECT coalesce(last_error, '') FROM outbox.dead_letters WHERE event_id = '$poison_b'}),
    qr/without an outcome/, 'b1: last_error says it was claimed without an outcome');
is(delivered_times($poison_b), 0, 'b1: it never reached the endpoint');

# (b2) Each kill comes at once, as a crash caused by the message itself would: within
# milliseconds of its claim, before the WAL writer (wal_writer_delay 200ms) wrote the claim.
my ($poison_c) = kill_while_held(0);
ok(wait_until(sub { dead_reason($poison_c) ne '' || queued($node, 'crashy', restarting => 1) == 0 }, 30),
    'b2: the message is dead-lettered or delivered');
is(dead_reason($poison_c), 'poison|3', 'b2: dead-lettered as poison after 3 claims without outcome')
  or diag('b2: after 3 kills it was ' . (delivered_times($poison_c) ? 'delivered normally' : 'not dead-lettered')
      . ': the attempts its killed claims counted were lost with the crash-restart (the worker '
      . 'commits its claims asynchronously)');
my @poison_ids = grep { dead_reason($_) =~ /^poison/ } ($poison_b, $poison_c);
my $crashy_got = grep { $_->{headers}{'webhook-id'} =~ /^(\Q$poison_b\E|\Q$poison_c\E)$/ }
  @{ $sink->requests_for(qr{^/crashy}) };
diag("the endpoint received the poison messages $crashy_got times");

# The worker goes on with other messages, of the same destination too.
my $t0 = time;
produce_part('b', 'crashy', 500);
ok(wait_until(sub { queued($node, 'crashy', restarting => 1) == 0 }, 60), 'afterwards 500 other messages are delivered');
diag(sprintf('500 messages delivered in %.2f s after the kills', time - $t0));
my @b_produced = split /\n/, $node->safe_psql('postgres', q{SELECT event_id FROM produced WHERE part = 'b'});
fault_summary('poison_crash', produced => \@b_produced,
    received => sink_event_ids($sink, qr{^/crashy}), dead => \@poison_ids);

$node->stop;
check_server_log($node, killed => $total_kills);
$sink->stop;
done_testing();
