# Runs TAP test files, several at once, and prints "TAP: N passed, N failed" (assertions; a file
# that dies or plans wrong counts as one more failure). Before it, one "TAP time: S s FILE" line
# per file, slowest first (.ci/run collects them into its timing table).
#
# The files mostly wait (on brokers, timeouts, restarts), so OUTBOX_TAP_JOBS of them (default 4)
# run side by side, each in a directory of its own (TESTDIR/<file name>), each with its own
# PostgreSQL ports (PostgreSQL::Test::Cluster's port reservations, in one directory for all:
# PG_TEST_PORT_DIR). Each file's output is kept and printed whole when the file ends.
#
# A file says what it needs in comment lines of its own, anywhere in it:
#
#   # outbox-tap: alone -- WHY
#       it runs in the serial group, before the others, one file at a time: it asserts a
#       latency, a rate or a ratio of times, or loads the machine on purpose.
#   # outbox-tap: alone, loads -- WHY
#       as alone, and it loads the machine on purpose: no file of another run's serial group
#       runs beside it (their timings would measure its load).
#   # outbox-tap: kafka-cluster shared|exclusive -- WHY
#   # outbox-tap: rabbitmq shared|exclusive
#   # outbox-tap: nats shared|exclusive
#   # outbox-tap: redis shared|exclusive
#       it uses the run's one real Apache Kafka cluster (test/tools/kafka_cluster), RabbitMQ
#       node or NATS server, which this script starts once (in the background, as soon as the
#       run begins) and stops when its last user has ended. The files get their addresses from
#       OUTBOX_SHARED_KAFKA_CLUSTER, OUTBOX_SHARED_RABBITMQ, OUTBOX_SHARED_NATS (their
#       directories; test/lib reads them); a file run without them starts its own. "shared":
#       with its own topics, queues, streams and principals, beside other users; "exclusive":
#       it stops or kills the server, so no other user runs meanwhile, and the server is
#       brought back up and healthy after it.
#
# OUTBOX_TAP_SLOTS names a directory of lock files that every run on the machine shares
# (test/run_tests makes it; test/pg_chroot shows it in the roots): at most OUTBOX_TAP_JOBS
# files run at once on the whole machine, whichever run they belong to (a build or the unit
# tests count as two: run_tap.pl --hold 2 -- make ...), the runs whose files run at the same
# time share them in proportion to the work each has left, and while a file of a serial group
# runs, at most OUTBOX_TAP_BESIDE_SERIAL other files run anywhere (default 1; parallel files, or
# a file of another run's serial group unless either is tagged "loads"; beside a "loads" file
# always at most one), and no build (a waiting build goes between two of its files).
# OUTBOX_TAP_TIMELINE names a file every run on the machine appends a line to when one of its
# files ends: "START END LABEL FILE [alone]" (epoch seconds; LABEL is OUTBOX_TAP_LABEL, e.g. the
# CI step), from which .ci/run draws how many files ran at once (test/tools/ci_timeline).
# OUTBOX_TAP_TIMES names a file of each file's seconds in an earlier run ("S FILE" lines):
# the longest start first (files it does not know count as long).
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT O_RDONLY);
use File::Basename qw(basename);
use File::Path qw(make_path);
use POSIX qw(:sys_wait_h);
use TAP::Harness;
use TAP::Parser::Aggregator;
use Time::HiRes qw(time sleep);

#-------------------------------------------------------------------------------------------
# Machine-wide slots (OUTBOX_TAP_SLOTS): a file holds one while it runs, a build two (--hold),
# a serial group a token.
#-------------------------------------------------------------------------------------------
my $jobs = $ENV{OUTBOX_TAP_JOBS} || 4;
my $slot_dir = $ENV{OUTBOX_TAP_SLOTS};
my %held;    # fileno => handle of every lock this process holds (closed in children)

sub lock_file {
    my ($name) = @_;
    my $path = "$slot_dir/$name";
    my $old = umask 0;
    my $fh;
    sysopen($fh, $path, O_RDWR | O_CREAT, 0666) or sysopen($fh, $path, O_RDONLY)
      or die "$path: $!\n";
    umask $old;
    return $fh;
}

# How many of the named locks another process holds now (tried without waiting; a lock this
# process holds through another handle counts too). Under the turnstile, so that what it
# counts cannot change but by a file or build ending.
sub held_elsewhere {
    my $n = 0;
    for my $name (@_) {
        my $fh = lock_file($name);
        $n++ unless flock($fh, LOCK_SH | LOCK_NB);
        close $fh;
    }
    return $n;
}
my @slot_names = map { "slot.$_" } 0 .. $jobs - 1;
# How many other files may run on the machine beside a serial file (beside a "loads" one: 1).
my $beside_serial = $ENV{OUTBOX_TAP_BESIDE_SERIAL} || 1;
# A serial group running a file holds one of the tokens, one more than that (a file of one
# run's serial group may run beside files of other runs' serial groups).
my @serial_names = map { "serial.$_" } 0 .. $beside_serial;

# Whether a file tagged "loads" runs now (it holds serial.loads exclusively; this process's own
# counts too).
sub loads_running {
    my $fh = lock_file('serial.loads');
    my $running = !flock($fh, LOCK_SH | LOCK_NB);
    close $fh;
    return $running;
}

# A free slot's locked handle, or undef: none is free now, or a serial file runs and already
# has as many files beside it as it may.
sub try_slot {
    return 'none' unless $slot_dir;
    my $turnstile = lock_file('turnstile');
    flock($turnstile, LOCK_EX | LOCK_NB) or return undef;
    my $serial = held_elsewhere(@serial_names);
    if ($serial) {
        my $beside = $serial - 1 + held_elsewhere(@slot_names);
        return undef if $beside >= (loads_running() ? 1 : $beside_serial);
    }
    for my $name (@slot_names) {
        my $fh = lock_file($name);
        if (flock($fh, LOCK_EX | LOCK_NB)) {
            $held{ fileno $fh } = $fh;
            return $fh;
        }
    }
    return undef;
}

sub release {
    my ($fh) = @_;
    return unless ref $fh;
    delete $held{ fileno $fh };
    close $fh;
}

# A build or the unit tests: $want slots, once no serial file runs anywhere. While it waits
# it says so (a shared lock on "build-waiting"), and every serial group lets it in between two
# of its files; it holds the turnstile while it waits for files elsewhere to give slots back,
# so that no new file takes them meanwhile. Returns the seconds it waited and the handles.
sub take_slots {
    my ($want) = @_;
    return (0) unless $slot_dir;
    $want = $jobs if $want > $jobs;
    my $t0 = time;
    my $waiting = lock_file('build-waiting');
    flock($waiting, LOCK_SH) or die "build-waiting: $!\n";
    my @fhs;
    while (1) {
        my $turnstile = lock_file('turnstile');
        flock($turnstile, LOCK_EX) or die "turnstile: $!\n";
        if (held_elsewhere(@serial_names)) {
            close $_->{fh} for @fhs;
            @fhs = ();
            close $turnstile;
            sleep 0.2;
            next;
        }
        for my $name (@slot_names) {
            last if @fhs >= $want;
            next if grep { $_->{name} eq $name } @fhs;
            my $fh = lock_file($name);
            push @fhs, { name => $name, fh => $fh } if flock($fh, LOCK_EX | LOCK_NB);
        }
        close $turnstile if @fhs >= $want;
        last if @fhs >= $want;
        # Still under the turnstile: wait for a file or build elsewhere to end.
        sleep 0.2;
        close $turnstile;
    }
    close $waiting;
    my @held = map { $_->{fh} } @fhs;
    $held{ fileno $_ } = $_ for @held;
    return (time - $t0, @held);
}

# A serial group's token: once at most $limit other files run on the whole machine (parallel
# files of any run, or the file of another run's serial group; default OUTBOX_TAP_BESIDE_SERIAL)
# and no build. Waits under the turnstile, so that no new file starts meanwhile (two serial
# groups pair up rather than one waiting for the other's end). Returns the seconds it waited
# and the token.
sub take_serial_token {
    my ($limit) = @_;
    return (0, undef) unless $slot_dir;
    $limit //= $beside_serial;
    my $t0 = time;
    my $turnstile = lock_file('turnstile');
    flock($turnstile, LOCK_EX) or die "turnstile: $!\n";
    while (1) {
        my $beside = held_elsewhere(@serial_names) + held_elsewhere(@slot_names);
        if ($beside <= $limit && $beside < $jobs) {
            for my $name (@serial_names) {
                my $fh = lock_file($name);
                next unless flock($fh, LOCK_EX | LOCK_NB);
                $held{ fileno $fh } = $fh;
                close $turnstile;
                return (time - $t0, $fh);
            }
        }
        sleep 0.2;
    }
}

# Two serial files pair up only if neither loads the machine: a file tagged "loads" holds
# serial.loads exclusively while it runs, every other serial file holds it shared. A group that
# must wait for it gives its token back meanwhile (a token held by a group running nothing kept
# every parallel file off the machine: one file ran on it for minutes); returns the lock and the
# token, taken again if it was given back. A "loads" file also waits until at most one other
# file runs (its token taken again with that limit).
sub serial_pairing {
    my ($loads, $token) = @_;
    return (undef, $token) unless $slot_dir;
    my $fh = lock_file('serial.loads');
    my $mode = $loads ? LOCK_EX : LOCK_SH;
    if (!flock($fh, $mode | LOCK_NB)) {
        release($token);
        flock($fh, $mode) or die "serial.loads: $!\n";
        (undef, $token) = take_serial_token($loads ? 1 : undef);
    } elsif ($loads && $beside_serial > 1) {
        release($token);
        (undef, $token) = take_serial_token(1);
    }
    $held{ fileno $fh } = $fh;
    return ($fh, $token);
}

# test/run_tap.pl --hold N -- COMMAND...: runs COMMAND holding N slots (a build or the unit
# tests, which keep both cores busy: test/run_tests holds 2 for them), so that the files of the
# serial groups never run beside one.
if (@ARGV && $ARGV[0] eq '--hold') {
    my (undef, $n, $dashes, @cmd) = @ARGV;
    die "usage: $0 --hold N -- COMMAND...\n" unless defined $n && $n =~ /^\d+$/ && ($dashes // '') eq '--' && @cmd;
    my ($waited, @slots) = take_slots($n);
    printf STDERR "run_tap: waited %.0f s for %d slots\n", $waited, $n if $waited >= 10;
    system { $cmd[0] } @cmd;
    exit($? == -1 ? 127 : $? & 127 ? 128 + ($? & 127) : $? >> 8);
}

my @files = @ARGV;
my $root = $ENV{OUTBOX_ROOT} // die "OUTBOX_ROOT is not set (run through test/run_tests)\n";
my $base = $ENV{TESTDIR} // die "TESTDIR is not set (run through test/run_tests)\n";
my $lib = "$root/test/lib";
my $pgxs_perl = `pg_config --pgxs`;
$pgxs_perl =~ s{/src/makefiles/pgxs.mk\s*$}{/src/test/perl};
make_path("$base/portlock");
$ENV{PG_TEST_PORT_DIR} //= "$base/portlock";
$| = 1;
my $scheduler = $$;

#-------------------------------------------------------------------------------------------
# What each file needs.
#-------------------------------------------------------------------------------------------
my %RESOURCES = (
    'kafka-cluster' => {
        env => 'OUTBOX_SHARED_KAFKA_CLUSTER',
        # --owner: a watchdog kills the brokers if this script dies before it stops them.
        start => sub { [ "$root/test/tools/kafka_cluster", '--dir', $_[0], 'start', '--timeout', 300,
                '--owner', $scheduler ] },
        # Brings back any node a file stopped or killed and waits until every partition is
        # fully replicated again.
        restore => sub { [ "$root/test/tools/kafka_cluster", '--dir', $_[0], 'start', '--timeout', 300 ] },
        stop => sub { [ "$root/test/tools/kafka_cluster", '--dir', $_[0], 'stop', '--kill' ] },
    },
    rabbitmq => {
        env => 'OUTBOX_SHARED_RABBITMQ',
        start => sub { [ "$root/test/tools/rabbitmq_node", 'start', $_[0] ] },
        restore => sub { [ "$root/test/tools/rabbitmq_node", 'start', $_[0] ] },
        stop => sub { [ "$root/test/tools/rabbitmq_node", 'kill', $_[0] ] },
    },
    nats => {
        env => 'OUTBOX_SHARED_NATS',
        start => sub { [ "$root/test/tools/nats_node", 'start', $_[0] ] },
        restore => sub { [ "$root/test/tools/nats_node", 'start', $_[0] ] },
        stop => sub { [ "$root/test/tools/nats_node", 'kill', $_[0] ] },
    },
    # redis (issue 42)
    redis => {
        env => 'OUTBOX_SHARED_REDIS',
        start => sub { [ "$root/test/tools/redis_node", 'start', $_[0] ] },
        restore => sub { [ "$root/test/tools/redis_node", 'start', $_[0] ] },
        stop => sub { [ "$root/test/tools/redis_node", 'kill', $_[0] ] },
    },
);

sub tags {
    my ($file) = @_;
    my %t = (alone => 0, loads => 0, uses => {});
    open my $fh, '<', $file or die "$file: $!\n";
    while (my $line = <$fh>) {
        next unless $line =~ /^#\s*outbox-tap:\s*(.*?)\s*$/;
        (my $spec = $1) =~ s/\s*--.*$//;
        for my $tag (split /\s*,\s*/, $spec) {
            if ($tag eq 'alone' || $tag eq 'loads') {
                $t{$tag} = 1;
            } elsif ($tag =~ /^(\S+)\s+(shared|exclusive)$/ && $RESOURCES{$1}) {
                $t{uses}{$1} = $2;
            } else {
                die "$file: unknown outbox-tap tag '$tag' (alone; loads; kafka-cluster, rabbitmq, nats or redis, shared or exclusive)\n";
            }
        }
    }
    die "$file: 'loads' goes with 'alone'\n" if $t{loads} && !$t{alone};
    return \%t;
}

my %known_seconds;
if ($ENV{OUTBOX_TAP_TIMES} && open my $fh, '<', $ENV{OUTBOX_TAP_TIMES}) {
    while (<$fh>) { $known_seconds{$2} = $1 if /^\s*([\d.]+)\s+(\S+)\s*$/ }
}
sub short_name { my ($f) = @_; $f =~ s{^.*/(test/(?:t|upgrade)/)}{$1}; return $f }
sub expected_seconds { return $known_seconds{ short_name($_[0]) } // 1e6 }

my (@parallel, @alone, %tags_of);
for my $file (@files) {
    $tags_of{$file} = tags($file);
    push @{ $tags_of{$file}{alone} ? \@alone : \@parallel }, $file;
}
# The longest first: the run ends soonest when the short ones fill the gaps at the end.
@parallel = sort { expected_seconds($b) <=> expected_seconds($a) } @parallel;

#-------------------------------------------------------------------------------------------
# Children: test files and the shared servers' start, restore and stop commands.
#-------------------------------------------------------------------------------------------
my %children;    # pid => { kind => 'test'|'resource', ... }

sub in_child {
    my ($log) = @_;
    close $_ for values %held;
    %held = ();
    setpgrp(0, 0);
    open(STDOUT, '>', $log) or die "$log: $!\n";
    open(STDERR, '>&', \*STDOUT) or die "stderr: $!\n";
    STDOUT->autoflush(1);
    STDERR->autoflush(1);
}

my %resource;    # name => { state => 'starting'|'ready'|'failed'|'stopped', dir, users, exclusive }

sub resource_command {
    my ($name, $what) = @_;
    my $r = $resource{$name};
    my $log = "$r->{dir}.$what.log";
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        in_child($log);
        exec(@{ $RESOURCES{$name}{$what}->($r->{dir}) }) or die "exec: $!\n";
    }
    $r->{state} = 'starting';
    $r->{since} = time;
    $children{$pid} = { kind => 'resource', name => $name, what => $what, log => $log };
}

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return '';
    local $/;
    return <$fh>;
}

# Starts the shared servers the files need, in the background.
for my $file (@files) {
    for my $name (keys %{ $tags_of{$file}{uses} }) {
        next if $resource{$name};
        $resource{$name} = { dir => "$base/shared-$name", users => 0, exclusive => 0 };
        make_path($resource{$name}{dir});
        resource_command($name, 'start');
    }
}

my (%seconds, %counts, @failed_files, %group);

sub start_test {
    my ($file, $slot) = @_;
    (my $name = basename($file)) =~ s/\.pl$//;
    my $dir = "$base/$name";
    make_path($dir);
    my $uses = $tags_of{$file}{uses};
    my @env;
    for my $r (sort keys %$uses) {
        if ($resource{$r}{state} eq 'ready') {
            push @env, $RESOURCES{$r}{env} => $resource{$r}{dir};
        }
        $resource{$r}{users}++;
        $resource{$r}{exclusive}++ if $uses->{$r} eq 'exclusive';
    }
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        in_child("$dir.out");
        # PostgreSQL 15 puts a file's data and logs under TESTDIR/tmp_check; 17 and later under
        # TESTDATADIR and TESTLOGDIR, else tmp_check and log in the current directory.
        %ENV = (%ENV, @env, TESTDIR => $dir, TESTDATADIR => "$dir/tmp_check",
            TESTLOGDIR => "$dir/tmp_check/log");
        chdir $dir or die "$dir: $!\n";
        my $harness = TAP::Harness->new({ verbosity => 0, lib => [ $pgxs_perl, $lib ], timer => 1,
                failures => 1, show_count => 0 });
        my $agg = TAP::Parser::Aggregator->new;
        $agg->start;
        $harness->aggregate_tests($agg, $file);
        $agg->stop;
        $harness->summary($agg) if $agg->has_problems;    # what failed, as prove shows it
        my ($p) = $agg->parsers($file);
        my $s = $p && $p->start_time && $p->end_time ? $p->end_time - $p->start_time : 0;
        open my $res, '>', "$dir.result" or die "$dir.result: $!\n";
        printf $res "%d %d %d %.1f\n", scalar($agg->passed), scalar($agg->failed),
          ($agg->has_problems ? 1 : 0), $s;
        close $res;
        POSIX::_exit(0);
    }
    $children{$pid} = { kind => 'test', file => $file, dir => $dir, slot => $slot, t0 => time };
}

sub finish_child {
    my ($pid, $status) = @_;
    my $c = delete $children{$pid} or return;
    if ($c->{kind} eq 'resource') {
        my $r = $resource{ $c->{name} };
        if ($c->{what} eq 'stop') {
            $r->{state} = 'stopped';
            return;
        }
        $r->{state} = $status == 0 ? 'ready' : 'failed';
        printf "# shared %s: %s %s in %.0f s%s\n", $c->{name}, $c->{what},
          ($status == 0 ? 'done' : 'FAILED'), time - $r->{since},
          ($status == 0 ? '' : "; its users start their own:\n" . slurp($c->{log}));
        return;
    }
    my $file = $c->{file};
    release($c->{slot});
    print slurp("$c->{dir}.out");
    my ($passed, $failed, $problems, $s) = split ' ', slurp("$c->{dir}.result");
    if (!defined $s) {    # the harness itself died
        ($passed, $failed, $problems, $s) = (0, 0, 1, time - $c->{t0});
        print "# $file: no result (harness exit status $status)\n";
    }
    $seconds{$file} = $s;
    if ($ENV{OUTBOX_TAP_TIMELINE} && open my $tl, '>>', $ENV{OUTBOX_TAP_TIMELINE}) {
        printf $tl "%.1f %.1f %s %s%s\n", $c->{t0}, time, $ENV{OUTBOX_TAP_LABEL} // '-',
          short_name($file), $tags_of{$file}{alone} ? ' alone' : '';
        close $tl;
    }
    $counts{passed} += $passed;
    $counts{failed} += $failed;
    $counts{bad_files} += $problems;
    push @failed_files, short_name($file) if $problems;
    my $uses = $tags_of{$file}{uses};
    for my $r (sort keys %$uses) {
        $resource{$r}{users}--;
        if ($uses->{$r} eq 'exclusive') {
            $resource{$r}{exclusive}--;
            # Whatever the file left stopped comes back before the next user starts.
            resource_command($r, 'restore') if $resource{$r}{state} eq 'ready';
        }
    }
}

# Reaps every child that has ended; true if any had.
sub reap {
    my ($block) = @_;
    my $any = 0;
    while ((my $pid = waitpid(-1, $block && !$any ? 0 : WNOHANG)) > 0) {
        finish_child($pid, $?);
        $any = 1;
    }
    return $any;
}

sub startable {
    my ($file) = @_;
    my $uses = $tags_of{$file}{uses};
    for my $r (keys %$uses) {
        my $res = $resource{$r};
        return 0 if $res->{state} eq 'starting';
        next if $res->{state} ne 'ready';    # failed: the file starts its own
        return 0 if $res->{exclusive};
        return 0 if $uses->{$r} eq 'exclusive' && $res->{users};
    }
    return 1;
}

# Stops a shared server once no file still to run needs it.
sub stop_unused {
    my (@still) = @_;
    for my $r (sort keys %resource) {
        next unless $resource{$r}{state} =~ /^(ready|failed)$/ && !$resource{$r}{users};
        next if grep { $tags_of{$_}{uses}{$r} } @still;
        resource_command($r, 'stop');
    }
}

my $interrupted = 0;
sub stop_everything {
    kill 'TERM', -$_ for grep { $children{$_}{kind} eq 'test' } keys %children;
    for my $r (keys %resource) {
        system(@{ $RESOURCES{$r}{stop}->($resource{$r}{dir}) }) if $resource{$r}{state} ne 'stopped';
    }
}
$SIG{INT} = $SIG{TERM} = sub { $interrupted = 1; stop_everything(); exit 1 };

# The runs whose files are running now on this machine share its slots in proportion to the
# work each has left (the expected seconds of its files still to run or running; a file with no
# earlier time counts as 30 s), so that the longest run gets the most: each registers with a
# lock it holds while it runs (run.PID) and writes that figure into it; each takes at most its
# share of the slots, at least one.
my $registration = $slot_dir ? lock_file("run.$$") : undef;
if ($registration) {
    flock($registration, LOCK_EX);
    $held{ fileno $registration } = $registration;
}
my $published = -1;
sub publish_work_left {
    my ($seconds) = @_;
    return unless $registration && int($seconds) != $published;
    $published = int($seconds);
    truncate($registration, 0);
    sysseek($registration, 0, 0);
    syswrite($registration, "$published\n");
}
sub fair_share {
    my ($mine) = @_;
    return $jobs unless $slot_dir;
    publish_work_left($mine);
    my ($all, $others) = (0, 0);
    for my $path (glob "$slot_dir/run.*") {
        open(my $fh, '<', $path) or next;
        if (flock($fh, LOCK_EX | LOCK_NB)) {    # its run has ended
            unlink $path;
            next;
        }
        my $left = <$fh> // '';
        my $s = $left =~ /^(\d+)/ ? $1 : 0;
        $all += $s;
        $others++ if $s > 0 && $path ne "$slot_dir/run.$$";
    }
    return $jobs if $all <= $mine;
    my $share = int($jobs * $mine / $all + 0.5);
    # A slot left for every other run with files to run, however little (a lone upgrade test
    # waited five minutes while the host's run took every slot it freed).
    $share = $jobs - $others if $share > $jobs - $others;
    return $share < 1 ? 1 : $share;
}
sub work_seconds {
    my $s = 0;
    for my $file (@_) {
        my $known = $known_seconds{ short_name($file) };
        $s += defined $known ? $known : 30;
    }
    return $s;
}

# The serial group first, one file at a time: the runs of all majors start at about the same
# time, so their serial groups pair up (two at once, see take_serial_token) while the machine
# has little else to run, and the parallel files of all runs fill the slots at the end, rather
# than the longest run's serial group running last with nothing beside it.
publish_work_left(0);
if (@alone) {
    print "# the serial group: " . join(' ', map { short_name($_) } @alone) . "\n";
    # Its files run with at most OUTBOX_TAP_BESIDE_SERIAL other files on the machine (1: what
    # they saw when CI ran one file at a time in each of its two lanes), which may be a file of
    # another run's serial group, and no build (test/run_tests holds two slots for those).
    my ($waited, $token) = take_serial_token();
    printf "# the serial group waited %.0f s for files and builds elsewhere on this machine\n", $waited
      if $waited >= 1;
    while (my $file = shift @alone) {
        (my $pairing, $token) = serial_pairing($tags_of{$file}{loads}, $token);
        reap(1) until startable($file);
        start_test($file, undef);
        reap(1) while grep { $_->{kind} eq 'test' } values %children;
        release($pairing);
        stop_unused(@alone, @parallel);
        # A build waiting elsewhere (another major's extension or unit tests: seconds with
        # ccache) goes between two files rather than after the whole group; the group goes on
        # once the build has its slots and has ended.
        if (@alone && $slot_dir) {
            my $waiting = lock_file('build-waiting');
            my $yield = !flock($waiting, LOCK_EX | LOCK_NB);
            if ($yield) {
                release($token);
                flock($waiting, LOCK_EX) or die "build-waiting: $!\n";
            }
            close $waiting;
            (undef, $token) = take_serial_token() if $yield;
        }
    }
    release($token);
}

# The parallel group.
my @pending = @parallel;
while (@pending || grep { $_->{kind} eq 'test' } values %children) {
    my $started = 0;
    my @running = map { $_->{file} } grep { $_->{kind} eq 'test' } values %children;
    my $share = fair_share(work_seconds(@pending, @running));
    while (@pending && (grep { $_->{kind} eq 'test' } values %children) < $share) {
        my ($i) = grep { startable($pending[$_]) } 0 .. $#pending;
        last unless defined $i;
        my $slot = try_slot() // last;
        start_test(splice(@pending, $i, 1), $slot);
        $started = 1;
    }
    stop_unused(@pending);
    reap(0) or $started or sleep 0.2;
}

# Whatever is still starting (a restore after the last file) is stopped once it is up.
while (1) {
    stop_unused();
    last unless %children;
    reap(1);
}

for my $file (sort { $seconds{$b} <=> $seconds{$a} } keys %seconds) {
    printf "TAP time: %7.1f s %s%s\n", $seconds{$file}, short_name($file),
      $tags_of{$file}{alone} ? ' (alone)' : '';
}
print "TAP failed: $_\n" for @failed_files;
if ($registration) {
    unlink "$slot_dir/run.$$";
    release($registration);
}
my $failed = $counts{failed} // 0;
printf "TAP: %d passed, %d failed\n", $counts{passed} // 0, $failed + ($failed ? 0 : $counts{bad_files} // 0);
