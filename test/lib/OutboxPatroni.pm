# The high-availability tier (test/t/131_patroni_ha.pl): a Patroni cluster of three PostgreSQL
# nodes and one etcd member (test/tools/patroni_cluster), an application's producers
# (test/tools/ha_producer.py), a watcher of every member (test/tools/ha_sampler.py), and the
# checks the scenarios make on what they recorded. Everything runs as the test user on
# 127.0.0.1.
package OutboxPatroni;

use strict;
use warnings;

use File::Basename qw(dirname);
use IPC::Run;
use JSON::PP;
use OutboxTest ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $root = $ENV{OUTBOX_ROOT} // die "OUTBOX_ROOT is not set (run through test/run_tests)";
my $tool = "$root/test/tools/patroni_cluster";

# Starts the cluster: etcd, three Patroni nodes running the PostgreSQL on PATH (test/run_tests
# puts the private copy with outbox installed first), outbox preloaded and outbox.databases set
# through Patroni's dynamic configuration, plus `params` (a hash of more PostgreSQL
# parameters). Returns once a leader runs and both replicas stream from it.
sub start {
    my ($class, %o) = @_;
    my $dir = PostgreSQL::Test::Utils::tempdir('patroni');
    # Unix socket paths must stay under 108 bytes; the data and logs stay in tmp_check, kept
    # when a test fails.
    my $sockets = PostgreSQL::Test::Utils::tempdir_short();
    my ($postgres) = grep { -x "$_/postgres" } split /:/, $ENV{PATH};
    die "no postgres on PATH" unless $postgres;
    my @ports = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 8;
    my $self = bless { dir => "$dir/cluster", database => $o{database} // 'app' }, $class;
    my %params = %{ $o{params} // {} };
    $self->tool('init', $self->{dir}, '--bindir', $postgres, '--ports', join(',', @ports),
        '--socket-dir', $sockets, '--database', $self->{database},
        map { ('--param', "$_=$params{$_}") } sort keys %params);
    $self->tool('start', $self->{dir});
    $self->{started} = 1;
    $self->wait_healthy(timeout => 300);
    for (split /\n/, $self->tool('members', $self->{dir})) {
        my ($name, $port, $data, $rest) = split / /;
        push @{ $self->{members} }, { name => $name, port => $port, data_dir => $data };
        $self->{member}{$name} = $self->{members}[-1];
    }
    return $self;
}

# Runs test/tools/patroni_cluster; dies on failure; returns its output.
sub tool {
    my ($self, @args) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run([$tool, @args], '>', \$out, '2>', \$err, IPC::Run::timeout(600))
      or die "patroni_cluster @args failed: $err$out";
    chomp $out;
    return $out;
}

sub dir { $_[0]{dir} }
sub members { map { $_->{name} } @{ $_[0]{members} } }
sub port { $_[0]{member}{ $_[1] }{port} }
sub data_dir { $_[0]{member}{ $_[1] }{data_dir} }
sub pg_log { "$_[0]{dir}/$_[1]/postgresql.log" }
sub patroni_log { "$_[0]{dir}/$_[1]/patroni.log" }
sub dsn { $_[0]->tool('dsn', $_[0]{dir}) }

# The leader that runs as a primary now.
sub leader { $_[0]->tool('leader', $_[0]{dir}) }

# Waits until a leader runs and `replicas` (default: all others) stream from it, one of them
# synchronous with sync => 1; returns the leader.
sub wait_healthy {
    my ($self, %o) = @_;
    return $self->tool('wait', $self->{dir}, '--timeout', $o{timeout} // 120,
        (defined $o{replicas} ? ('--replicas', $o{replicas}) : ()), ($o{sync} ? '--sync' : ()));
}

# psql on one member: the rows, unaligned; dies on error.
sub psql {
    my ($self, $member, $sql, %o) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run(['psql', '-X', '-h', '127.0.0.1', '-p', $self->port($member), '-U', 'postgres',
            '-d', $o{db} // $self->{database}, '-Atq', '-v', 'ON_ERROR_STOP=1', '-c', $sql],
        '>', \$out, '2>', \$err, IPC::Run::timeout(120))
      or die "psql on $member failed: $err";
    chomp $out;
    return $out;
}

sub switchover { my ($self, $to) = @_; $self->tool('switchover', $self->{dir}, $to) }
sub set_config { my ($self, @kv) = @_; $self->tool('set', $self->{dir}, @kv) }
sub start_member { my ($self, $m) = @_; $self->tool('start', $self->{dir}, $m) }

# kill -9 of the member's Patroni and postmaster; returns the time.
sub kill_member {
    my ($self, $m) = @_;
    my $out = $self->tool('kill', $self->{dir}, $m);
    $out =~ /at ([\d.]+)$/ or die "patroni_cluster kill: $out";
    return $1;
}

# Every member's PostgreSQL log must show no crash and no PANIC (a kill -9 of a postmaster
# leaves no line: nothing is left to write it).
sub check_logs {
    my ($self) = @_;
    for my $m ($self->members) {
        my $log = -e $self->pg_log($m) ? slurp_file($self->pg_log($m)) : '';
        unlike($log, qr/terminated by signal/, "$m: no process terminated by a signal");
        unlike($log, qr/PANIC/, "$m: no PANIC in its log");
    }
}

sub stop {
    my ($self) = @_;
    return unless delete $self->{started};
    $self->tool('stop', $self->{dir});
}

sub DESTROY { my $self = shift; eval { $self->stop }; }

#-------------------------------------------------------------------------------------------
# The producers (test/tools/ha_producer.py) and the watcher (test/tools/ha_sampler.py).
#-------------------------------------------------------------------------------------------
package OutboxPatroni::Process;

use IPC::Run;
use JSON::PP;

sub start {
    my ($class, @cmd) = @_;
    my $self = bless { out => '', err => '' }, $class;
    $self->{handle} = IPC::Run::start(\@cmd, '>', \$self->{out}, '2>', \$self->{err});
    return $self;
}

# SIGTERM, then waits; returns its output.
sub stop {
    my ($self) = @_;
    if (my $h = delete $self->{handle}) {
        $h->signal('TERM');
        $h->finish;
    }
    return $self->{out};
}

sub DESTROY { my $self = shift; $self->{handle}->kill_kill if $self->{handle}; }

package OutboxPatroni;

# Producers committing about `rate` messages a second over `clients` connections for
# `destination` until ->stop_producers; their acknowledgements go to a directory of their own.
sub start_producers {
    my ($self, %o) = @_;
    my $out = PostgreSQL::Test::Utils::tempdir('producers');
    $self->{producers} = OutboxPatroni::Process->start('python3', "$root/test/tools/ha_producer.py",
        '--dsn', $self->dsn, '--out', $out, '--clients', $o{clients} // 8,
        '--rate', $o{rate} // 500, '--destination', $o{destination});
    $self->{acked_dir} = $out;
    OutboxTest::wait_until(sub { -e "$out/started" }, 30, 'the producers') or die "producers did not start";
}

# Stops the producers; returns their summary (a hash: acked, failed, reconnects, max_gap_s,
# rate, seconds, last_errors) and the acknowledged commits: a list of [event_id, time, port,
# client], each client's in the order it committed them.
sub stop_producers {
    my ($self) = @_;
    my $p = delete $self->{producers};
    my $summary = $p->stop;
    my $s = eval { decode_json($summary) } or die "producers: $p->{err}$summary";
    my @acked;
    for my $f (glob "$self->{acked_dir}/acked-*.txt") {
        my ($client) = $f =~ /acked-(\d+)\.txt$/;
        for (split /\n/, slurp_file($f)) {
            my @f = split / /;
            push @acked, [@f, $client] if @f == 3;
        }
    }
    return ($s, \@acked);
}

# The watcher of every member, until ->stop_sampler, which returns the samples (hashes as
# ha_sampler.py writes them).
sub start_sampler {
    my ($self) = @_;
    $self->{samples_file} = PostgreSQL::Test::Utils::tempdir('samples') . '/samples.jsonl';
    $self->{sampler} = OutboxPatroni::Process->start('python3', "$root/test/tools/ha_sampler.py",
        '--cluster', $self->{dir}, '--out', $self->{samples_file}, '--dbname', $self->{database});
}

sub stop_sampler {
    my ($self) = @_;
    (delete $self->{sampler})->stop;
    return [ map { decode_json($_) } grep { /\}$/ } split /\n/, slurp_file($self->{samples_file}) ];
}

#-------------------------------------------------------------------------------------------
# The postgres_exporter queries of docker/postgres_exporter/queries.yaml, as the exporter runs
# them on every member: a list of [name, SQL] where the SQL returns "<rows>/<NULL metric
# values>" of that query.
#-------------------------------------------------------------------------------------------
sub exporter_checks {
    my ($json, $err) = ('', '');
    IPC::Run::run(['python3', '-c', q{
import json, sys, yaml
q = yaml.safe_load(open(sys.argv[1]))
print(json.dumps({k: {"query": v["query"], "metrics": [list(m.items())[0] for m in v["metrics"]]}
                  for k, v in q.items()}))
}, "$root/docker/postgres_exporter/queries.yaml"], '>', \$json, '2>', \$err)
      or die "queries.yaml: $err";
    my $queries = decode_json($json);
    my @checks;
    for my $name (sort keys %$queries) {
        my $q = $queries->{$name};
        my @metrics = map { $_->[0] } grep { $_->[1]{usage} ne 'LABEL' } @{ $q->{metrics} };
        my $nulls = join(' + ', map { qq{(q."$_" IS NULL)::int} } @metrics);
        push @checks, [$name, "SELECT count(*) || '/' || coalesce(sum($nulls), 0) FROM ($q->{query}) AS q"];
    }
    return @checks;
}

#-------------------------------------------------------------------------------------------
# What the samples say.
#-------------------------------------------------------------------------------------------

# The samples grouped by round: a list of { t => time, nodes => { name => sample } }.
sub rounds {
    my ($samples) = @_;
    my %by;
    for my $s (@$samples) {
        my $r = $by{ $s->{round} } //= { round => $s->{round}, t => $s->{t}, nodes => {} };
        $r->{nodes}{ $s->{node} } = $s;
    }
    return [ map { $by{$_} } sort { $a <=> $b } keys %by ];
}

# Outbox processes that ran on a replica: in a round where the member answered in recovery,
# a launcher or worker in its pg_stat_activity, or one in the kernel's process list whose parent
# is the member's postmaster of that moment (or an outbox-driver whose parent is such a worker).
# Returns descriptions; empty when none.
sub on_replica {
    my ($samples) = @_;
    my @found;
    for my $s (@$samples) {
        next unless $s->{up} && $s->{recovery};
        push @found, sprintf('%.3f %s: %d outbox backends in pg_stat_activity while in recovery',
            $s->{t}, $s->{node}, $s->{backends}) if $s->{backends};
        my %children = map { $_->[0] => 1 }
          grep { $_->[2] ne 'driver' && defined $s->{postmaster} && $_->[1] == $s->{postmaster} }
          @{ $s->{procs} };
        my @theirs = grep { $children{ $_->[0] } || ($_->[2] eq 'driver' && $children{ $_->[1] }) }
          @{ $s->{procs} };
        push @found, sprintf('%.3f %s: outbox processes %s of postmaster %d while in recovery',
            $s->{t}, $s->{node}, join(',', map { "$_->[2]:$_->[0]" } @theirs), $s->{postmaster})
          if @theirs;
    }
    return @found;
}

# Rounds in which outbox processes ran in the trees of two members at once. Returns
# descriptions.
sub two_at_once {
    my ($rounds) = @_;
    my @found;
    for my $r (@$rounds) {
        my @with = grep { @{ $r->{nodes}{$_}{procs} } } sort keys %{ $r->{nodes} };
        push @found, sprintf('%.3f: outbox processes in %s', $r->{t}, join(' and ', @with)) if @with > 1;
    }
    return @found;
}

# The changes of leadership the samples show: a list of { from => old primary (or undef),
# to => new primary, promoted => time of the first round the new one answered as a primary,
# first_delivery => time of the first round its workers had delivered something (undef:
# never), old_gone => time of the last round with an outbox process of the old one before the
# promotion, old_back => time of a round after the promotion in which an outbox process of the
# old one ran while it was not the primary (undef: none) }.
sub takeovers {
    my ($rounds) = @_;
    my @events;
    my $primary;
    for my $i (0 .. $#$rounds) {
        my $r = $rounds->[$i];
        my @now = grep { my $s = $r->{nodes}{$_}; $s->{up} && defined $s->{recovery} && !$s->{recovery} }
          sort keys %{ $r->{nodes} };
        next unless @now == 1;
        my $p = $now[0];
        if (!defined $primary) {
            $primary = $p;
            next;
        }
        next if $p eq $primary;
        my $e = { from => $primary, to => $p, promoted => $r->{t} };
        for my $j (reverse 0 .. $i - 1) {
            if (@{ $rounds->[$j]{nodes}{$primary}{procs} }) {
                $e->{old_gone} = $rounds->[$j]{t};
                last;
            }
        }
        for my $j ($i .. $#$rounds) {
            my $s = $rounds->[$j]{nodes}{$p};
            if (!$e->{first_delivery} && $s->{up} && ($s->{delivered} // 0) > 0) {
                $e->{first_delivery} = $rounds->[$j]{t};
            }
            my $old = $rounds->[$j]{nodes}{$primary};
            my $old_primary = $old->{up} && defined $old->{recovery} && !$old->{recovery};
            last if $old_primary;  # it leads again: a later event
            $e->{old_back} //= $rounds->[$j]{t} if @{ $old->{procs} };
        }
        push @events, $e;
        $primary = $p;
    }
    return @events;
}

1;
