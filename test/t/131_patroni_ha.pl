# High availability as users run it (issue 43): three PostgreSQL nodes managed by Patroni with
# one etcd member (Debian's packages, test/tools/patroni_cluster), outbox preloaded and
# outbox.databases set through Patroni's dynamic configuration, use_pg_rewind on, delivering to
# the Kafka test broker. Eight producers (test/tools/ha_producer.py) commit about 500 messages/s
# for the whole of each scenario through libpq's multi-host connection string with
# target_session_attrs=read-write, retrying a failed transaction as an application does, and
# record every commit acknowledged to them; each transaction also writes its event id to table
# `produced`, so what exists on the timeline that survives is what that table holds on the last
# leader. A watcher (test/tools/ha_sampler.py) samples every member five times a second: role,
# outbox backends in pg_stat_activity, the workers' delivered counter, and the outbox processes
# the kernel runs in the member's data directory (backends a killed postmaster left behind
# included).
#
# One cluster serves the three scenarios in turn, each with a destination and topic of its own:
#   1. switchover: `patronictl switchover` to a replica, and back;
#   2. failover: kill -9 of the leader's Patroni and postmaster; a replica is promoted when the
#      leader key expires; the old node is started again and rejoins as a replica through
#      pg_rewind;
#   3. failover_sync: the same with synchronous_mode: true; the synchronous standby is
#      promoted.
# Checks, for each:
#   - every message of the surviving timeline is delivered (fault_summary: nothing lost);
#     every acknowledged commit survived, hence was delivered (switchover, failover_sync); in
#     the asynchronous failover the acknowledged commits that did not survive are the
#     unreplicated tail (for each producer connection, later than all of its commits that
#     survived), counted and reported, and the messages the old leader delivered that never
#     reached the new one are reported as "not produced" (as in test/t/083);
#   - duplicates counted (fault_summary);
#   - no outbox worker ever ran on a replica: in no sample was a launcher or worker in a
#     replica's pg_stat_activity, nor a process of the replica's postmaster (or its driver);
#   - never did two members run outbox processes at once, and a demoted member ran none after
#     the new leader was promoted, until it led again;
#   - each new leader delivered within 5 s of its promotion.
# Every scenario ends with its FAULT line (produced / received / lost / duplicates), named
# patroni_<scenario>.
#
# Scenarios can be chosen: OUTBOX_PATRONI_SCENARIOS=failover,failover_sync (default all three).
# outbox-tap: alone, loads -- three PostgreSQL nodes under sustained load; asserts delivery within 5 s of a promotion
use strict;
use warnings;
use IPC::Run;
use JSON::PP;
use OutboxPatroni;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

if ($ENV{OUTBOX_IN_ROOT}) {
    # Like the broker tiers: Patroni and etcd are the host's packages, and the cluster tests
    # PostgreSQL's replication, the same on every major we build for.
    plan skip_all => 'the Patroni tier runs on the host\'s PostgreSQL, not in a root';
}

my %want = map { $_ => 1 } split /,/, ($ENV{OUTBOX_PATRONI_SCENARIOS} // 'switchover,failover,failover_sync');
my $rate = 500;
my $t_start = time;
my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $cluster = OutboxPatroni->start(params => {
    # A claim held by a leader that died is taken again after this long; a failover test
    # should not wait the default 30 s for the few messages that were in flight.
    'outbox.lease_timeout' => '5s' });
my $leader = $cluster->leader;
diag(sprintf('cluster up in %.1f s; leader %s', time - $t_start, $leader));
$cluster->psql($leader, 'CREATE DATABASE app', db => 'postgres');
$cluster->psql($leader, q{
    CREATE EXTENSION outbox;
    CREATE TABLE produced (event_id uuid PRIMARY KEY, destination text NOT NULL)});
is($cluster->psql($leader, q{SELECT current_setting('outbox.databases')}), 'app',
    'outbox.databases comes from Patroni\'s configuration');
ok(wait_until(sub { $cluster->psql($leader, 'SELECT count(*) FROM outbox.workers()') eq '1' }, 30),
    'the leader runs a worker for app');

# The configuration docs/high-availability.md tells users to write is the one the cluster runs.
{
    my ($out, $err) = ('', '');
    IPC::Run::run(['python3', '-c', q{
import re, sys, yaml
doc = open(sys.argv[1]).read()
shown = yaml.safe_load(re.search(r"```yaml\n(.*?)```", doc, re.S).group(1))["bootstrap"]["dcs"]["postgresql"]
used = yaml.safe_load(open(sys.argv[2]))["bootstrap"]["dcs"]["postgresql"]
def flat(d, p=""):
    return {k2: v2 for k, v in d.items()
            for k2, v2 in (flat(v, p + k + ".").items() if isinstance(v, dict) else [(p + k, str(v))])}
shown, used = flat(shown), flat(used)
print("\n".join(f"{k}: shown {v}, used {used.get(k)}" for k, v in sorted(shown.items()) if used.get(k) != v))
}, "$ENV{OUTBOX_ROOT}/docs/high-availability.md", $cluster->dir . '/node1/patroni.yml'],
        '>', \$out, '2>', \$err) or die "comparing the configurations: $err";
    chomp $out;
    is($out, '', 'the Patroni configuration of docs/high-availability.md is the one the cluster runs');
}

# The first few of a list, for a diagnostic.
sub first_few { my $n = shift; return @_ > $n ? @_[0 .. $n - 1] : @_ }

# One scenario: a destination and topic of its own, producers and the watcher running while
# $faults->() does its part (it returns a hash: kill_at => the time of a kill, if any).
sub scenario {
    my ($name, $faults, %o) = @_;
    my $t0 = time;
    my $primary = $cluster->leader;
    $cluster->psql($primary, qq{SELECT outbox.create_destination('$name', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "$name"}')});
    $cluster->start_sampler;
    $cluster->start_producers(destination => $name, rate => $rate);
    sleep 5;
    my $info = $faults->() // {};
    sleep 5;
    my ($p, $acked) = $cluster->stop_producers;
    diag(sprintf('%s: producers acknowledged %d commits in %.1f s (%.0f/s), %d failed attempts, '
          . '%d connections, at most %.2f s without an acknowledgement',
        $name, $p->{acked}, $p->{seconds}, $p->{rate}, $p->{failed}, $p->{reconnects}, $p->{max_gap_s}));
    # While a primary could be reached: a failover leaves the producers without one for the
    # time the leader key takes to expire.
    my $up_rate = $p->{acked} / ($p->{seconds} - $p->{max_gap_s});
    cmp_ok($up_rate, '>=', $rate / 2, sprintf('%s: the producers committed %.0f/s while a primary '
          . 'could be reached (at least half the %d/s asked)', $name, $up_rate, $rate));
    $primary = $cluster->leader;
    ok(wait_until(sub { $cluster->psql($primary,
        qq{SELECT count(*) FROM outbox.messages WHERE destination = '$name'}) eq '0' }, 90),
        "$name: the leader delivered every queued message");
    my $samples = $cluster->stop_sampler;
    my @survived = split /\n/, $cluster->psql($primary,
        qq{SELECT event_id FROM produced WHERE destination = '$name'});
    my $received = kafka_event_ids($broker, $name);

    # What was lost, and what arrived that the surviving timeline never had.
    my %survived = map { $_ => 1 } @survived;
    my %got = map { $_ => 1 } @$received;
    my @not_survived = grep { !$survived{ $_->[0] } } @$acked;
    my @lost = grep { !$got{ $_->[0] } } @$acked;
    my %acked = map { $_->[0] => 1 } @$acked;
    my @unexpected = grep { !$survived{$_} } keys %got;
    fault_summary("patroni_$name", produced => \@survived, received => $received,
        unexpected => $o{async} ? scalar(@unexpected) : 0);
    if ($o{async}) {
        # The old leader's WAL is one sequence: a replica that has a commit of it has every
        # commit before it. Each client commits one transaction after the other, so of its
        # commits on the old leader, those that did not survive must come after all those that
        # did.
        my (%last_survived, @not_tail);
        for my $a (grep { $_->[2] == $info->{old_port} } @$acked) {
            $last_survived{ $a->[3] } = $a->[1]
              if $survived{ $a->[0] } && $a->[1] > ($last_survived{ $a->[3] } // 0);
        }
        @not_tail = grep { $_->[1] < ($last_survived{ $_->[3] } // 0) } @not_survived;
        is(scalar(@not_tail), 0, "$name: the acknowledged commits that did not survive are the "
              . 'unreplicated tail: each after its client\'s last surviving commit')
          or diag(join("\n", map { "$_->[0] (client $_->[3]) acknowledged at $_->[1], before its "
                  . "client's last surviving commit at $last_survived{ $_->[3] }" } first_few(5, @not_tail)));
        is(scalar(grep { $_->[2] != $info->{old_port} } @not_survived), 0,
            "$name: every acknowledged commit that did not survive was made on the old leader");
        my @times = sort { $a <=> $b } map { $_->[1] } @not_survived;
        diag(sprintf('%s: %d acknowledged commits did not survive (unreplicated at the kill%s), %d of '
              . 'them were delivered by the old leader; %d messages arrived that the new timeline '
              . 'does not have (%d of them acknowledged)', $name, scalar(@not_survived),
            @times ? sprintf(', acknowledged from %+.3f s to %+.3f s of it', $times[0] - $info->{kill_at},
                $times[-1] - $info->{kill_at}) : '',
            scalar(@not_survived) - scalar(@lost), scalar(@unexpected),
            scalar(grep { $acked{$_} } @unexpected)));
    } else {
        is(scalar(@not_survived), 0, "$name: every acknowledged commit survived");
        is(scalar(@lost), 0, "$name: every acknowledged commit was delivered")
          or diag('lost: ' . join(' ', map { $_->[0] } first_few(5, @lost)));
    }

    # Who ran outbox processes, and when.
    my $rounds = OutboxPatroni::rounds($samples);
    my @replica_samples = grep { $_->{up} && $_->{recovery} } @$samples;
    my @primary_seen = grep { $_->{up} && defined $_->{recovery} && !$_->{recovery}
          && $_->{backends} >= 2 && (grep { $_->[2] eq 'driver' } @{ $_->{procs} }) } @$samples;
    cmp_ok(scalar(@primary_seen), '>', 10,
        "$name: the watcher saw the primary's launcher and worker, and its driver process");
    my @on_replica = OutboxPatroni::on_replica($samples);
    is(scalar(@on_replica), 0, sprintf('%s: no outbox process ran on a replica (%d samples of replicas, '
          . '%d rounds)', $name, scalar(@replica_samples), scalar(@$rounds)))
      or diag(join("\n", first_few(10, @on_replica)));
    my @both = OutboxPatroni::two_at_once($rounds);
    is(scalar(@both), 0, "$name: never did two members run outbox processes at once")
      or diag(join("\n", first_few(10, @both)));
    my @takeovers = OutboxPatroni::takeovers($rounds);
    is(scalar(@takeovers), $o{takeovers}, "$name: $o{takeovers} changes of leader seen");
    for my $e (@takeovers) {
        my $what = "$name: $e->{from} -> $e->{to}";
        ok(defined $e->{first_delivery}, "$what: the new leader delivers");
        my $delay = ($e->{first_delivery} // 1e10) - $e->{promoted};
        diag(sprintf('%s: promoted at +%.1f s, delivering %.1f s later; the old leader\'s last outbox '
              . 'process seen %.1f s before the promotion', $what, $e->{promoted} - $t0, $delay,
            $e->{promoted} - ($e->{old_gone} // $e->{promoted})));
        cmp_ok($delay, '<=', 5, "$what: the new leader delivers within 5 s of its promotion");
        ok(!defined $e->{old_back}, "$what: the demoted member runs no outbox process after it stepped down")
          or diag(sprintf('one ran at +%.1f s', $e->{old_back} - $t0));
    }
    diag(sprintf('%s: %.0f s', $name, time - $t0));
    return $info;
}

# 1. Switchover to a replica, and back.
if ($want{switchover}) {
    scenario('switchover', sub {
        my $from = $cluster->leader;
        my ($to) = grep { $_ ne $from } $cluster->members;
        $cluster->switchover($to);
        is($cluster->wait_healthy(timeout => 60), $to, "switchover: $to leads");
        sleep 5;
        $cluster->switchover($from);
        is($cluster->wait_healthy(timeout => 60), $from, "switchover: $from leads again");
        return {};
    }, takeovers => 2);
}

# 2. and 3. Failover: kill -9 of the leader's Patroni and postmaster; the old node rejoins as
# a replica through pg_rewind.
sub failover {
    my ($name, %o) = @_;
    my $old = $cluster->leader;
    my $sync;
    if ($o{sync}) {
        my $status = decode_json($cluster->tool('status', $cluster->dir));
        ($sync) = map { $_->{name} } grep { $_->{role} eq 'sync_standby' } @{ $status->{members} };
        ok(defined $sync, "$name: a synchronous standby is chosen");
    }
    my $kill_at = $cluster->kill_member($old);
    my $new = $cluster->wait_healthy(replicas => 1, timeout => 90);
    isnt($new, $old, "$name: a replica was promoted");
    is($new, $sync, "$name: the synchronous standby was promoted") if $o{sync};
    diag(sprintf('%s: %s leads, %.1f s after the kill', $name, $new, time - $kill_at));
    sleep 3;
    my $log_from = -s $cluster->patroni_log($old);
    my $t = time;
    $cluster->start_member($old);
    is($cluster->wait_healthy(timeout => 120), $new, "$name: $old is back, as a replica of $new");
    diag(sprintf('%s: %s streams again %.1f s after its Patroni started', $name, $old, time - $t));
    my $log = substr(slurp_file($cluster->patroni_log($old)), $log_from);
    like($log, qr/running pg_rewind from/, "$name: $old rejoined through pg_rewind");
    like($log, qr/pg_rewind exit code=0/, "$name: pg_rewind succeeded");
    is($cluster->psql($old, 'SELECT pg_is_in_recovery()'), 't', "$name: $old is a replica");
    return { kill_at => $kill_at, old_port => $cluster->port($old) };
}

if ($want{failover}) {
    scenario('failover', sub { failover('failover') }, async => 1, takeovers => 1);
}

if ($want{failover_sync}) {
    $cluster->set_config('synchronous_mode=true');
    $cluster->wait_healthy(sync => 1, timeout => 60);
    scenario('failover_sync', sub { failover('failover_sync', sync => 1) }, takeovers => 1);
}

# The exporter queries on every member: rows on the leader, none on the replicas, no error.
$leader = $cluster->leader;
for my $m ($cluster->members) {
    for my $check (OutboxPatroni::exporter_checks()) {
        my ($name, $sql) = @$check;
        my $out = eval { $cluster->psql($m, $sql) } // "error: $@";
        if ($m eq $leader) {
            like($out, qr{^\d+/0$}, "$m (leader): exporter query $name: no error, no metric column NULL");
        } else {
            is($out, '0/0', "$m (replica): exporter query $name returns no rows, no error");
        }
    }
}

$cluster->check_logs;
$cluster->stop;
$broker->stop;
diag(sprintf('the Patroni tier took %.0f s', time - $t_start));
done_testing();
