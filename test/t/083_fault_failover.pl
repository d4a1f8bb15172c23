# Fault: failover. A primary with a streaming physical standby delivers to Kafka while
# producers commit ~200 messages/s, each transaction also writing its event_id to a side table.
# On the standby no outbox process runs and nothing spins: no launcher or worker in
# pg_stat_activity, outbox.workers() empty, its processes other than the WAL replay use next to
# no CPU and its log stays silent for 3 s while the primary works. Then the primary is stopped
# hard (immediate) under load and the standby promoted: its launcher starts, its worker
# delivers the rest. Produced = the side table as read on the promoted standby (what was
# committed on the primary and replicated); received = distinct ce_id headers read by kcat.
# Messages the old primary delivered whose producer commit never reached the standby are
# reported as "not produced" (asynchronous replication may lose the last commits).
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $conf = join("\n", 'log_statement = none', 'max_connections = 30',
    "outbox.lease_timeout = '5s'", "wal_receiver_status_interval = '1s'");
my $primary = outbox_node('primary', init => { allows_streaming => 1 }, conf => $conf);
$primary->safe_psql('postgres', qq{
    SELECT outbox.create_destination('fo', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "fo"}');
    CREATE TABLE produced (event_id uuid PRIMARY KEY);
    CREATE SEQUENCE n_seq;
});
$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;

my $produce = recorded_insert('fo');
my $pgbench = start_pgbench($primary, clients => 2, rate => 200, seconds => 60, script => $produce);
ok(wait_until(sub { $primary->safe_psql('postgres', 'SELECT count(*) FROM produced') > 500 }, 30),
    'the primary produces');
$primary->wait_for_catchup($standby);
cmp_ok($standby->safe_psql('postgres', 'SELECT count(*) FROM produced'), '>', 0,
    'the standby replays the producers\' commits');
cmp_ok(scalar(@{ kafka_event_ids($broker, 'fo') }), '>', 0, 'the primary delivers to Kafka');

# The standby: no outbox process, nothing spinning.
is($standby->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'outbox%'}),
    '0', 'standby: no outbox launcher or worker in pg_stat_activity');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM outbox.workers()'), '0',
    'standby: outbox.workers() lists none');

# ordering = key on the standby: the heads found from the keys' rows (outbox._key_heads, what
# stats() and blocked_keys() read) are the ones the primary has, though the standby only reads.
$primary->safe_psql('postgres', q{
    SELECT outbox.create_destination('fo_keyed', 'webhook', '{"url": "http://127.0.0.1:1/", "ordering": "key"}');
    SELECT outbox.pause('fo_keyed');
    INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'fo_keyed', 'k' || (g % 3), jsonb_build_object('n', g) FROM generate_series(1, 30) g;
    DELETE FROM outbox.messages WHERE id IN (SELECT id FROM outbox._key_heads('fo_keyed'));
    SELECT count(*) FROM outbox._key_heads('fo_keyed');});
$primary->wait_for_catchup($standby);
my $heads = q{SELECT string_agg(m.key || ':' || (m.payload->>'n'), ',' ORDER BY m.key)
                FROM outbox._key_heads('fo_keyed') AS h JOIN outbox.messages AS m ON m.id = h.id};
is($standby->safe_psql('postgres', $heads), 'k0:6,k1:4,k2:5',
    'standby: the heads of the keys are the second messages, as on the primary');
is($primary->safe_psql('postgres', $heads), 'k0:6,k1:4,k2:5', 'primary: the same heads');
$primary->safe_psql('postgres', q{
    DELETE FROM outbox.messages WHERE destination = 'fo_keyed';
    SELECT outbox.drop_destination('fo_keyed');});

# CPU time (utime + stime) of the standby's processes, by kind, from /proc.
sub standby_cpu {
    my ($ppid) = split /\n/, slurp_file($standby->data_dir . '/postmaster.pid');
    my %cpu;
    for my $stat (glob '/proc/[0-9]*/stat') {
        open my $fh, '<', $stat or next;
        my $line = <$fh>;
        close $fh;
        next unless defined $line && $line =~ /^(\d+) \((.*)\) \S+ (\d+) (.*)$/;
        my ($pid, $ppid_of, $rest) = ($1, $3, $4);
        next unless $pid == $ppid || $ppid_of == $ppid;
        my @f = split / /, $rest;   # fields from pgrp (5th) on
        my $ticks = $f[9] + $f[10];  # utime, stime (14th, 15th)
        open my $cfh, '<', "/proc/$pid/cmdline" or next;
        my $cmd = <$cfh> // '';
        close $cfh;
        $cmd =~ s/\0/ /g;
        my $kind = $cmd =~ /startup|walreceiver/ ? 'replay' : 'other';
        $cpu{$kind} += $ticks;
        $cpu{procs}{$pid} = $cmd;
    }
    return \%cpu;
}
my $hz = 100;   # USER_HZ
my $log_before = -s $standby->logfile;
my $cpu0 = standby_cpu();
sleep 3;   # the window the standby's CPU use is measured over
my $cpu1 = standby_cpu();
my $log_growth = (-s $standby->logfile) - $log_before;
my $other = ($cpu1->{other} - $cpu0->{other}) / $hz;
my $replay = ($cpu1->{replay} - $cpu0->{replay}) / $hz;
my @new = grep { !$cpu0->{procs}{$_} } keys %{ $cpu1->{procs} };
diag(sprintf('standby over 3 s: %.2f s CPU in WAL replay, %.2f s in all other processes; '
      . '%d new processes; log grew by %d bytes', $replay, $other, scalar(@new), $log_growth));
cmp_ok(scalar(keys %{ $cpu1->{procs} }), '>=', 5, 'standby: its processes were found in /proc');
cmp_ok($other, '<', 0.3, 'standby: its processes other than WAL replay use next to no CPU');
is(scalar(@new), 0, 'standby: no process was started meanwhile (nothing restarts in a loop)')
  or diag(join("\n", map { $cpu1->{procs}{$_} } @new));
is($log_growth, 0, 'standby: its log stays silent')
  or diag(substr(slurp_file($standby->logfile), $log_before));

# Failover under load: the primary is stopped hard, the standby promoted.
sleep 2;   # 2 s more of the producers' load first
$primary->stop('immediate');
my $stopped_at = time;
$pgbench->finish;   # fails: its server went away
$standby->promote;
my $promoted_at = time;
ok(wait_until(sub {
    $standby->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox worker'}) eq '1' }, 30),
    'promoted: the launcher started a worker');
diag(sprintf('a worker ran %.1f s after the promotion was requested', time - $promoted_at));
ok(wait_until(sub { $standby->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'promoted: its worker delivered the rest');
diag(sprintf('queue empty %.1f s after the primary stopped', time - $stopped_at));
is($standby->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

my @produced = split /\n/, $standby->safe_psql('postgres', 'SELECT event_id FROM produced');
my $received = kafka_event_ids($broker, 'fo');
my $r = fault_summary('failover', produced => \@produced, received => $received,
    unexpected => 50);   # commits of the last moments that never reached the standby
diag("$r->{unexpected} messages arrived whose producer commit the standby never received");

# Production goes on on the new primary.
$standby->safe_psql('postgres', $produce);
ok(wait_until(sub { $standby->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'the promoted standby delivers new messages');

$standby->stop;
check_server_log($primary);
check_server_log($standby);
$broker->stop;
done_testing();
