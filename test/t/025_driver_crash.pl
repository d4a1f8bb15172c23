# A crash of the driver process (outbox-driver: librdkafka, libcurl) is the worker's business,
# never the postmaster's. During a 50,000-message drain the worker's driver process is killed
# with SIGSEGV, then (next drain) SIGABRT, then SIGKILL, while a second client session holds an
# open transaction. After each: the postmaster did not restart (pg_postmaster_start_time()
# unchanged, the open transaction commits afterwards, no "terminating any other active server
# processes" in the log), the broker holds every message (kcat), nothing is dead-lettered, the
# duplicates stay within the messages that were in flight without an answer at the moment of the
# crash (printed, with the duplicates), and the log and outbox.stats().last_error say that
# messages were in flight and are being retried. outbox.workers() shows the new driver_pid and
# driver_restarts.
# Then, on a node of its own: kill -9 of the worker itself is still a backend crash (the
# postmaster restarts everything), and its driver process goes with it.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
# restart_after_crash stays off (the test framework's default): had the postmaster taken a
# driver crash for a backend crash, the server would be down and every later step would fail.
my $node = outbox_node('drvcrash', conf => "log_statement = none\noutbox.lease_timeout = '10s'");
$node->safe_psql('postgres', 'CREATE TABLE bystander (n int)');

my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

# A client in the middle of a transaction for the whole test.
my $session = $node->background_psql('postgres');
$session->set_query_timer_restart();
my $session_pid = $session->query_safe('SELECT pg_backend_pid()');
$session->query_safe('BEGIN');
$session->query_safe('INSERT INTO bystander VALUES (1)');

# The key of every message of a topic, read by kcat (keys only: much cheaper than JSON).
sub topic_keys {
    my ($topic) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run(['kcat', '-C', '-b', $bootstrap, '-t', $topic, '-o', 'beginning', '-e', '-q',
            '-f', '%k\n', '-X', 'fetch.wait.max.ms=50'],
        '>', \$out, '2>', \$err, IPC::Run::timeout(300))
      or die "kcat failed: $err";
    return [ split /\n/, $out ];
}
sub worker {
    my $row = $node->safe_psql('postgres',
        q{SELECT pid || '|' || coalesce(driver_pid, 0) || '|' || driver_restarts FROM outbox.workers()});
    return split /\|/, $row;
}

my %expected_signal = (SEGV => [11, 'Segmentation fault'], ABRT => [6, 'Aborted'],
    KILL => [9, 'Killed']);
for my $sig ('SEGV', 'ABRT', 'KILL') {
    my $dest = 'drv_' . lc $sig;
    my ($number, $name) = @{ $expected_signal{$sig} };
    $node->safe_psql('postgres', qq{
        SELECT outbox.create_destination('$dest', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "$dest"}');
        SELECT outbox.pause('$dest');
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$dest', '$dest-' || g, jsonb_build_object('n', g) FROM generate_series(1, 50000) g;
    });
    # Each produce request is answered after 200 ms, and the kill comes when the worker reports
    # messages in flight: at the crash, messages are in flight without an answer. (Should none
    # be at that instant after all, the next driver process is killed too: at most 5 times.)
    $broker->ctl('rtt all 200');
    my $offset = -s $node->logfile;
    $node->safe_psql('postgres', "SELECT outbox.resume('$dest')");
    ok(wait_until(sub { queued($node, $dest) < 40000 }, 120), "$dest: the drain is under way");
    my ($worker_pid, $driver_pid, $restarts) = worker();
    ok($driver_pid > 0, "$dest: the worker has a driver process ($driver_pid)");
    my ($in_flight, $total_in_flight, $line, @killed) = (0, 0);
    while ($in_flight == 0 && @killed < 5) {
        my $pid;
        wait_until(sub {
            my @w = worker();
            $pid = $w[1];
            $pid > 0 && $node->safe_psql('postgres', 'SELECT in_flight FROM outbox.workers()') > 0 }, 30);
        my $left = queued($node, $dest);
        ok(kill($sig, $pid), "$dest: driver process $pid killed with SIG$sig at $left queued");
        push @killed, $pid;
        # The log line says how many messages were in flight without an answer.
        ok(wait_until(sub {
            my $log = slurp_file($node->logfile, $offset);
            ($line) = $log =~ /(outbox: driver process $pid was killed by signal $number \(\Q$name\E\)[^\n]*)/;
            defined $line }, 30), "$dest: the worker logged the crash with its signal")
          or diag(slurp_file($node->logfile, $offset));
        like($line // '', qr/messages? in flight without an answer will be delivered again/,
            "$dest: ... and that the unanswered messages will be delivered again");
        ($in_flight) = ($line // '') =~ /\($dest: (\d+)\)/;
        $in_flight //= 0;
        $total_in_flight += $in_flight;
        next if $in_flight > 0;
        diag("$dest: no message was in flight at that instant; the next driver process too");
        wait_until(sub { my @w = worker(); $w[1] > 0 && $w[1] != $pid }, 30);
    }
    cmp_ok($in_flight, '>', 0, "$dest: messages were in flight at the crash");
    $broker->ctl('rtt all 0');

    ok(wait_until(sub { queued($node, $dest) == 0 }, 180), "$dest: drained after the crash");
    my ($worker_after, $driver_after, $restarts_after) = worker();
    is($worker_after, $worker_pid, "$dest: the same worker process carried on");
    ok($driver_after > 0 && !(grep { $_ == $driver_after } @killed),
        "$dest: a new driver process runs ($driver_after)");
    cmp_ok($restarts_after, '>', $restarts, "$dest: outbox.workers().driver_restarts counted it");
    ok(!(grep { kill(0, $_) } @killed), "$dest: the killed driver processes are gone");
    like(stats_row($node, $dest)->{last_error} // '',
        qr/^driver process crashed \(signal $number: \Q$name\E\); \d+ messages? in flight will be retried$/,
        "$dest: outbox.stats().last_error says messages in flight are retried");

    my $got = topic_keys($dest);
    my %seen;
    $seen{$_}++ for @$got;
    my $missing = grep { !$seen{"$dest-$_"} } 1 .. 50000;
    is($missing, 0, "$dest: the broker holds all 50,000 messages");
    my $duplicates = scalar(@$got) - scalar(keys %seen);
    my $s = stats_row($node, $dest);
    diag("SIG$sig: $total_in_flight messages in flight without an answer at the crash"
        . (@killed > 1 ? "es (" . scalar(@killed) . " kills)" : "")
        . ", $duplicates duplicates at the broker (delivered_total $s->{delivered_total}, "
        . "failed_total $s->{failed_total}, deferred_total $s->{deferred_total})");
    cmp_ok($duplicates, '<=', $total_in_flight,
        "$dest: duplicates stay within what was in flight without an answer");
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
        '0', "$dest: nothing dead-lettered");
}

is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started,
    'the postmaster never restarted');
is($session->query_safe('SELECT pg_backend_pid()'), $session_pid,
    'the client session is the same backend');
$session->query_safe('COMMIT');
$session->quit;
is($node->safe_psql('postgres', 'SELECT count(*) FROM bystander'), '1',
    'the transaction it held open all along committed');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminating any other active server processes/,
    'the server log has no backend crash');
$node->stop;
check_server_log($node);

#-------------------------------------------------------------------------------------------
# kill -9 of the worker: a backend crash, as before; its driver process dies with it.
#-------------------------------------------------------------------------------------------
my $node2 = outbox_node('workerkill', conf => "restart_after_crash = on\nlog_statement = none");
$node2->safe_psql('postgres', qq{
    SELECT outbox.create_destination('wk', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "wk"}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('wk', 'before', '{}');
});
ok(wait_until(sub { $node2->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'worker kill: a message is delivered first');
my ($wpid, $dpid) = split /\|/, $node2->safe_psql('postgres',
    q{SELECT pid || '|' || driver_pid FROM outbox.workers()});
ok(kill('KILL', $wpid), "worker $wpid killed with SIGKILL");
ok(wait_until(sub { !kill(0, $dpid) }, 10), "its driver process $dpid died with it");
ok(wait_until(sub {
    my $r = eval { $node2->safe_psql('postgres', q{SELECT pid || '|' || coalesce(driver_pid, 0) FROM outbox.workers()}) } // '';
    my ($p) = split /\|/, $r;
    $p && $p != $wpid }, 60), 'the postmaster restarted and a new worker runs');
like(slurp_file($node2->logfile), qr/terminating any other active server processes/,
    'the worker kill was a backend crash');
$node2->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('wk', 'after', '{}')});
ok(wait_until(sub { grep { $_->{key} eq 'after' } @{ $broker->consume('wk') } }, 60),
    'after the restart messages are delivered through a new driver process');
$node2->stop;
check_server_log($node2, killed => 1);

$broker->stop;
done_testing();
