# Shared pieces of the outbox TAP suites: a PostgreSQL node with the extension preloaded, the
# Kafka test broker (librdkafka mock cluster, real wire protocol on 127.0.0.1) checked with
# kcat as an independent consumer, the webhook sink, and waiting helpers. Everything runs on
# loopback.
package OutboxTest;

use strict;
use warnings;

use Exporter 'import';
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use POSIX ();

# decode_json from JSON::XS (libjson-xs-perl: test/install_deps) where there is one, in each
# package of this file: JSON::PP took ~15 s of CPU for the 30,000 messages a crash test reads
# back, most of what such a file spent in Perl.
BEGIN {
    sub prefer_json_xs {
        my ($package) = @_;
        return unless eval { require JSON::XS; 1 };
        no strict 'refs';
        no warnings qw(redefine prototype);
        *{"${package}::decode_json"} = \&JSON::XS::decode_json;
    }
    prefer_json_xs(__PACKAGE__);
}
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(outbox_node wait_until kafka_broker webhook_sink check_server_log
                 worker_pids stats_row check_key_order queued produce dead_letter
                 wait_for_cycles reload_and_wait refusing_port);

my $root = $ENV{OUTBOX_ROOT} // die "OUTBOX_ROOT is not set (run through test/run_tests)";

# A started node with shared_preload_libraries = outbox and CREATE EXTENSION done in
# database postgres (the default outbox.databases). Options: conf => extra postgresql.conf
# text, extension => 0 to skip CREATE EXTENSION, start => 0 to leave it stopped,
# test_switches => 1 to turn on outbox.test_switches (the outbox.debug_* fault injection) for the
# files that use a debug switch; every other node is configured as a user's would be.
sub outbox_node {
    my ($name, %opts) = @_;
    my $node = PostgreSQL::Test::Cluster->new($name);
    $node->init(%{ $opts{init} // {} });
    $node->append_conf('postgresql.conf', join("\n",
        "shared_preload_libraries = 'outbox'",
        "outbox.poll_interval = '200ms'",
        # the webhook sinks and the test brokers listen on loopback, which webhooks, and brokers
        # that roles other than superusers configure, may reach only when allowed
        "outbox.webhook_allowed_networks = '127.0.0.0/8, ::1'",
        "outbox.broker_allowed_networks = '127.0.0.0/8, ::1'",
        "log_min_messages = info",
        ($opts{test_switches} ? "outbox.test_switches = on" : ()),
        $opts{conf} // '') . "\n");
    return $node if defined $opts{start} && !$opts{start};
    $node->start;
    $node->safe_psql('postgres', 'CREATE EXTENSION outbox')
      unless defined $opts{extension} && !$opts{extension};
    return $node;
}

# Polls `check` (a sub returning true when done) every 100 ms for up to `timeout` seconds.
# A socket bound to 127.0.0.1 (port $port, or one the kernel picks) without listening: a
# connection to its port is refused, and while the test holds it no other server on the machine
# (another CI lane's) can take the port, nor can a connection use it as its own. Close it to let
# a server start there.
sub refusing_port {
    my ($port) = @_;
    return IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port // 0, Proto => 'tcp',
        ReuseAddr => 1) // die "cannot bind 127.0.0.1:" . ($port // 0) . ": $!";
}

sub wait_until {
    my ($check, $timeout, $what) = @_;
    my $deadline = time + ($timeout // 60);
    # The poll's pace: quick at first (most conditions hold within a few tenths of a second),
    # then four times a second. Each poll of a check is a psql process and a new backend, tens
    # of milliseconds of CPU: at ten polls a second, four files waiting kept most of a core
    # busy in CI.
    my $pause = 0.05;
    while (time < $deadline) {
        return 1 if $check->();
        sleep $pause;
        $pause = $pause * 1.5 > 0.25 ? 0.25 : $pause * 1.5;
    }
    diag("timed out after ${timeout}s waiting for: " . ($what // 'condition'));
    return 0;
}

# Waits until the delivery workers of database db (default postgres) have completed $n more
# turns than when called (outbox.workers().cycles: each poll, each claim). For the checks that
# something does not happen: the workers had their chances, however long they took on a loaded
# machine. Returns true, or false after timeout seconds (default 60).
sub wait_for_cycles {
    my ($node, $n, %o) = @_;
    my $sql = "SELECT coalesce(sum(cycles), 0) FROM outbox.workers() WHERE database = '"
      . ($o{db} // 'postgres') . "'";
    my $from = $node->safe_psql($o{via} // 'postgres', $sql);
    return wait_until(sub { $node->safe_psql($o{via} // 'postgres', $sql) >= $from + $n },
        $o{timeout} // 60, "$n more worker turns");
}

# Reloads the server's configuration (after a change to postgresql.conf or ALTER SYSTEM that
# sets $name to $value) and waits until the server has read the file (a new session shows the
# value: the postmaster has signalled its children by then) and the delivery workers have
# completed two turns more than before the reload (the second starts with the file read; with
# polls far apart, turns => 1). Instead of a fixed sleep "until the worker has read the new
# settings". Options as for wait_for_cycles.
sub reload_and_wait {
    my ($node, $name, $value, %o) = @_;
    my $sql = "SELECT coalesce(sum(cycles), 0) FROM outbox.workers() WHERE database = '"
      . ($o{db} // 'postgres') . "'";
    my $from = $node->safe_psql($o{via} // 'postgres', $sql);
    $node->reload;
    return wait_until(sub { $node->safe_psql('postgres', "SHOW $name") eq $value },
        $o{timeout} // 30, "SHOW $name = $value")
      && wait_until(sub { $node->safe_psql($o{via} // 'postgres', $sql) >= $from + ($o{turns} // 2) },
        $o{timeout} // 60, 'worker turns after the reload');
}

# PIDs of the running outbox workers of a node.
sub worker_pids {
    my ($node) = @_;
    my $out = $node->safe_psql('postgres', 'SELECT pid FROM outbox.workers() ORDER BY pid');
    return grep { length } split /\n/, $out;
}

# outbox.stats() row of one destination as a hash.
sub stats_row {
    my ($node, $destination, $db) = @_;
    my $out = $node->safe_psql($db // 'postgres', qq{
        SELECT row_to_json(s) FROM outbox.stats() s WHERE destination = '$destination'});
    return $out ? decode_json($out) : undef;
}

# How many messages are queued (for one destination, or in all), in database postgres or db.
# With restarting => 1, while the server does not answer (it restarts after a crash the test
# caused) a number larger than any queue, so that waiting for the queue to drain goes on.
sub queued {
    my ($node, $destination, %o) = @_;
    my $where = defined $destination ? " WHERE destination = '$destination'" : '';
    my $sql = "SELECT count(*) FROM outbox.messages$where";
    return $node->safe_psql($o{db} // 'postgres', $sql) unless $o{restarting};
    my $n = eval { $node->safe_psql($o{db} // 'postgres', $sql) };
    return $n // 1e9;
}

# Inserts the messages numbered $from to $to for $destination in one statement: payload
# {"n": n} (with pad => N also "pad": N x's), key PREFIX || n with key => PREFIX (else none).
# With record => 'TABLE SELECT EXPRESSIONS' the same statement also inserts a row for each into
# that table, the expressions reading the inserted messages' destination and event_id (e.g.
# record => "produced SELECT 'a', destination, event_id"). db => another database. Returns the
# event_ids.
sub produce {
    my ($node, $destination, $from, $to, %o) = @_;
    my $key = defined $o{key} ? "'$o{key}' || g" : 'NULL';
    my $payload = defined $o{pad} ? "jsonb_build_object('n', g, 'pad', repeat('x', $o{pad}))"
      : "jsonb_build_object('n', g)";
    my $insert = "INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$destination', $key, $payload FROM generate_series($from, $to) g";
    my $sql = defined $o{record}
      ? "WITH m AS ($insert RETURNING destination, event_id) INSERT INTO $o{record} FROM m RETURNING event_id"
      : "$insert RETURNING event_id";
    return [ split /\n/, $node->safe_psql($o{db} // 'postgres', $sql) ];
}

# reason|attempts|last_error of the dead letter with that key ('' if there is none).
sub dead_letter {
    my ($node, $key) = @_;
    return $node->safe_psql('postgres', qq{
        SELECT reason || '|' || attempts || '|' || last_error FROM outbox.dead_letters WHERE key = '$key'});
}

# The server log must show no crash other than those the test caused itself.
sub check_server_log {
    my ($node, %opts) = @_;
    my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
    # Line by line: a regex that starts with .* takes minutes on the tens of MB a busy test's
    # log reaches (every statement is logged).
    my @signals = grep { index($_, 'terminated by signal') >= 0 } split /\n/, $log;
    my $allowed = $opts{killed} // 0;
    my @unexpected = grep { !/signal 9: Killed/ } @signals;
    is(scalar(@unexpected), 0, $node->name . ': no process terminated by an unexpected signal')
      or diag(join("\n", @unexpected));
    cmp_ok(scalar(@signals) - scalar(@unexpected), '<=', $allowed,
        $node->name . ": at most $allowed processes killed (by the test)");
    unlike($log, qr/PANIC/, $node->name . ': no PANIC in the server log');
}

sub kafka_broker { return OutboxTest::Broker->start(@_) }

# Per-key ordering as a consumer sees it: $sent_sql selects (event_id, id, key) of every
# message the test committed; $messages are what kcat read from the topic. Asserts that every
# message arrived, that each key went to one partition and that, for every key, first
# arrivals follow id order. Returns the number of repeats.
sub check_key_order {
    my ($node, $sent_sql, $messages, $what, $db) = @_;
    my (%id_of, %key_of);
    for (split /\n/, $node->safe_psql($db // 'postgres', $sent_sql)) {
        my ($e, $id, $k) = split /\|/;
        $id_of{$e} = $id;
        $key_of{$e} = $k;
    }
    my (%first_seen, %last_id, %out_of_order, %partitions);
    for my $m (sort { $a->{partition} <=> $b->{partition} || $a->{offset} <=> $b->{offset} }
        @$messages) {
        my $e = $m->{headers}{ce_id};
        next if $first_seen{$e}++;
        my $k = $m->{key};
        $partitions{$k}{ $m->{partition} } = 1;
        $out_of_order{$k}++ if defined $last_id{$k} && $id_of{$e} < $last_id{$k};
        $last_id{$k} = $id_of{$e} if !defined $last_id{$k} || $id_of{$e} > $last_id{$k};
    }
    my @missing = sort { $id_of{$a} <=> $id_of{$b} } grep { !$first_seen{$_} } keys %id_of;
    is(scalar(@missing), 0, "$what: every one of the " . scalar(keys %id_of) . ' messages arrived')
      or diag(join("\n", map { "missing id $id_of{$_} key $key_of{$_} event $_" }
            @missing[0 .. ($#missing < 9 ? $#missing : 9)]));
    is(scalar(grep { keys %{ $partitions{$_} } > 1 } keys %partitions), 0,
        "$what: each key went to one partition");
    is(scalar(keys %out_of_order), 0, "$what: for every key, first arrivals are in id order")
      or diag(explain(\%out_of_order));
    return scalar(@$messages) - scalar(keys %first_seen);
}
sub webhook_sink { return OutboxTest::Sink->start(@_) }

#-------------------------------------------------------------------------------------------
# The Kafka test broker (test/tools/kafka_broker) and kcat as the independent consumer.
#-------------------------------------------------------------------------------------------
package OutboxTest::Broker;

use File::Temp;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
BEGIN { OutboxTest::prefer_json_xs(__PACKAGE__) }
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

sub start {
    my ($class, %opts) = @_;
    my $dir = PostgreSQL::Test::Utils::tempdir();
    my @cmd = ("$root/test/tools/kafka_broker", '--bootstrap-file', "$dir/bootstrap",
        '--control-file', "$dir/control", @{ $opts{args} // [] });
    my ($out, $err) = ('', '');
    my $h = IPC::Run::start(\@cmd, '>', \$out, '2>', "$dir/broker.log");
    OutboxTest::wait_until(sub { -s "$dir/bootstrap" && -s "$dir/control" }, 30, 'kafka broker')
      or die "kafka broker did not start";
    my $self = bless { handle => $h, dir => $dir }, $class;
    $self->{bootstrap} = PostgreSQL::Test::Utils::slurp_file("$dir/bootstrap");
    $self->{control} = PostgreSQL::Test::Utils::slurp_file("$dir/control");
    chomp($self->{bootstrap}, $self->{control});
    return $self;
}

sub bootstrap { $_[0]{bootstrap} }

# Sends one control command (see test/tools/README.md); dies unless the reply is "ok".
sub ctl {
    my ($self, $cmd) = @_;
    my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{control},
        Proto => 'tcp', Timeout => 10) or die "cannot reach broker control port: $!";
    print $sock "$cmd\n";
    my $reply = <$sock> // '';
    close $sock;
    chomp $reply;
    die "broker: '$cmd' -> '$reply'" unless $reply =~ /^ok/;
    return $reply;
}

sub down { $_[0]->ctl('down all') }
sub up { $_[0]->ctl('up all') }

# Every message of a topic from offset 0, read by kcat: a list of hashes with key, payload,
# headers (hash of name => value), partition, offset and ts.
sub consume {
    my ($self, $topic, %opts) = @_;
    my ($out, $err) = ('', '');
    # isolation => 'read_committed' (librdkafka's default too) or 'read_uncommitted'.
    my @isolation = $opts{isolation} ? ('-X', "isolation.level=$opts{isolation}") : ();
    my $ok = IPC::Run::run(['kcat', '-C', '-b', $self->{bootstrap}, '-t', $topic, '-o', 'beginning',
            '-e', '-q', '-J', '-X', 'fetch.wait.max.ms=50', @isolation],
        '>', \$out, '2>', \$err, IPC::Run::timeout($opts{timeout} // 120));
    # A topic nothing was produced to yet does not exist: no messages. (kcat with librdkafka
    # 2.0, bookworm's, waits for it; with 2.8 and later it stops with this error.)
    return [] if !$ok && $out eq '' && $err =~ /Unknown topic or partition/;
    die "kcat failed: $err" unless $ok;
    my @messages;
    for my $line (split /\n/, $out) {
        next unless $line =~ /^\{/;
        my $m = decode_json($line);
        my %headers;
        my @h = @{ $m->{headers} // [] };
        while (@h) { my $k = shift @h; $headers{$k} = shift @h; }
        $m->{headers} = \%headers;
        push @messages, $m;
    }
    return \@messages;
}

# Sum of the partitions' end offsets of a topic (kcat -Q), for runs larger than the mock keeps.
sub end_offset_sum {
    my ($self, $topic, $partitions) = @_;
    my $sum = 0;
    for my $p (0 .. ($partitions // 4) - 1) {
        my ($out, $err) = ('', '');
        my $ok = IPC::Run::run(['kcat', '-Q', '-b', $self->{bootstrap}, '-t', "$topic:$p:-1"],
            '>', \$out, '2>', \$err, IPC::Run::timeout(60));
        # A topic (or partition) nothing was produced to yet holds nothing; kcat with
        # librdkafka 2.8 and later says so as an error (see consume()).
        next if !$ok && $err =~ /Unknown (?:topic or )?partition/;
        die "kcat -Q failed: $err" unless $ok;
        $sum += $1 if $out =~ /\[\d+\]\s+offset\s+(-?\d+)/;
    }
    return $sum;
}

sub stop {
    my ($self) = @_;
    return unless $self->{handle};
    eval { $self->ctl('quit') };
    $self->{handle}->finish;
    delete $self->{handle};
}

sub DESTROY { my $self = shift; $self->{handle}->kill_kill if $self->{handle}; }

#-------------------------------------------------------------------------------------------
# The webhook sink (test/tools/webhook_sink.py).
#-------------------------------------------------------------------------------------------
package OutboxTest::Sink;

use IPC::Run;
use JSON::PP;
BEGIN { OutboxTest::prefer_json_xs(__PACKAGE__) }
use PostgreSQL::Test::Utils;

sub start {
    my ($class, %opts) = @_;
    my $dir = PostgreSQL::Test::Utils::tempdir();
    my @cmd = ('python3', "$root/test/tools/webhook_sink.py", '--port-file', "$dir/port",
        '--log', "$dir/requests.jsonl", (defined $opts{port} ? ('--port', $opts{port}) : ()),
        (defined $opts{bind} ? ('--bind', $opts{bind}) : ()));
    my $h = IPC::Run::start(\@cmd, '>', "$dir/sink.out", '2>', "$dir/sink.err");
    OutboxTest::wait_until(sub { -s "$dir/port" }, 30, 'webhook sink') or die "sink did not start";
    my $port = PostgreSQL::Test::Utils::slurp_file("$dir/port");
    chomp $port;
    return bless { handle => $h, dir => $dir, port => $port, bind => $opts{bind} // '127.0.0.1' },
      $class;
}

sub port { $_[0]{port} }
sub url {
    my ($self, $path) = @_;
    my $host = $self->{bind} eq '::1' ? '[::1]' : $self->{bind};
    return "http://$host:$self->{port}$path";
}

# Creates webhook destination $name for this sink's $path, with the other config keys given.
sub create_destination {
    my ($self, $node, $name, $path, %config) = @_;
    my $json = JSON::PP->new->canonical->encode({ url => $self->url($path), %config });
    $node->safe_psql('postgres', "SELECT outbox.create_destination('$name', 'webhook', '$json')");
}

# The requests to one path (a string: that path; a regexp: the paths it matches).
sub requests_for {
    my ($self, $path) = @_;
    return [ grep { ref $path ? $_->{path} =~ $path : $_->{path} eq $path } @{ $self->requests } ];
}

# Every request the sink recorded, in arrival order (hashes as in test/tools/README.md).
sub requests {
    my ($self) = @_;
    my $file = "$self->{dir}/requests.jsonl";
    return [] unless -e $file;
    open my $fh, '<', $file or die $!;
    my @r;
    while (my $line = <$fh>) {
        next unless $line =~ /\}\s*$/;  # skip a line being written
        push @r, decode_json($line);
    }
    close $fh;
    return \@r;
}

sub stop {
    my ($self) = @_;
    return unless $self->{handle};
    $self->{handle}->signal('TERM');
    $self->{handle}->finish;
    delete $self->{handle};
}

sub DESTROY { my $self = shift; $self->{handle}->kill_kill if $self->{handle}; }

1;

#-------------------------------------------------------------------------------------------
# Fault-injection matrix (test/t/08x_*.pl): producers that record what they committed, the
# event_ids that reached Kafka or a webhook, and the one-line summary every scenario ends with.
#-------------------------------------------------------------------------------------------
package OutboxTest;

push @EXPORT, qw(fault_summary kafka_event_ids sink_event_ids start_pgbench recorded_insert
                 kafka_receiver);

# A live consumer of a topic (kcat from offset 0, in a process group of its own) that writes
# each record's payload to a file as it arrives, after its time of arrival in ms since the
# epoch: "<ms> <payload>". For commit-to-consumer latencies measured on this machine's clock.
# Returns an object with ->lines (what arrived so far) and ->stop.
sub kafka_receiver {
    my ($broker, $topic) = @_;
    my $file = PostgreSQL::Test::Utils::tempdir() . "/received";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        # A copy of the test process: it must not run the test's END blocks (Test::More's plan,
        # the nodes' teardown) nor die in its signal handlers (PostgreSQL 17 and later's
        # PostgreSQL::Test::Cluster dies on SIGTERM, and the dying copy printed a second plan
        # into the test's output: "More than one plan found"). Killed, it just goes.
        $SIG{$_} = 'DEFAULT' for qw(TERM INT HUP PIPE);
        setpgrp(0, 0);
        open(my $out, '>', $file) or POSIX::_exit(1);
        $out->autoflush(1);
        open(my $in, '-|', 'kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-o', 'beginning',
            '-u', '-q', '-f', '%s\n', '-X', 'fetch.wait.max.ms=5') or POSIX::_exit(1);
        while (my $line = <$in>) {
            printf $out "%.3f %s", time() * 1000, $line;
        }
        POSIX::_exit(0);
    }
    return bless { pid => $pid, file => $file }, 'OutboxTest::Receiver';
}

package OutboxTest::Receiver;

sub lines {
    my ($self) = @_;
    open(my $in, '<', $self->{file}) or return [];
    my @lines = <$in>;
    chomp @lines;
    return \@lines;
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'TERM', -$self->{pid};
    waitpid($self->{pid}, 0);
    delete $self->{pid};
}

sub DESTROY { $_[0]->stop }

package OutboxTest;

# A pgbench script that inserts one message for $destination (key k<n>, payload {"n": n}, n
# from sequence n_seq) and records its event_id in table produced, in the same transaction:
# what was committed is exactly what is in produced. The test creates both.
sub recorded_insert {
    my ($destination) = @_;
    return qq{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT '$destination', 'k' || n, jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') AS n) s
    RETURNING event_id)
INSERT INTO produced SELECT event_id FROM m;
};
}

# Every ce_id header of a topic from offset 0, read by kcat (one per message received, repeats
# included). Only the headers are printed: much cheaper than consume() for large topics.
sub kafka_event_ids {
    my ($broker, $topic, %opts) = @_;
    my ($out, $err) = ('', '');
    my $ok = IPC::Run::run(['kcat', '-C', '-b', $broker->bootstrap, '-t', $topic, '-o', 'beginning',
            '-e', '-q', '-f', '%h\n', '-X', 'fetch.wait.max.ms=50'],
        '>', \$out, '2>', \$err, IPC::Run::timeout($opts{timeout} // 180));
    return [] if !$ok && $out eq '' && $err =~ /Unknown topic or partition/;  # see consume()
    die "kcat failed: $err" unless $ok;
    return [ $out =~ /(?:^|,)ce_id=([0-9a-f-]{36})/mg ];
}

# The webhook-id of every request the sink answered with a 2xx on paths matching $path_re.
sub sink_event_ids {
    my ($sink, $path_re) = @_;
    return [ map { $_->{headers}{'webhook-id'} }
          grep { $_->{path} =~ $path_re && $_->{status} >= 200 && $_->{status} < 300 }
          @{ $sink->requests } ];
}

# pgbench in the background: script => SQL text, clients, rate (tx/s, optional), seconds or
# transactions. Returns the IPC::Run handle; ->finish and read ${ $h->{outbox_err} } after.
sub start_pgbench {
    my ($node, %o) = @_;
    my $dir = PostgreSQL::Test::Utils::tempdir();
    PostgreSQL::Test::Utils::append_to_file("$dir/script.sql", $o{script});
    my @cmd = ('pgbench', '-n', '-c', $o{clients} // 1, '-j', $o{threads} // 1,
        (defined $o{rate} ? ('-R', $o{rate}) : ()),
        (defined $o{seconds} ? ('-T', $o{seconds}) : ('-t', $o{transactions} // 1)),
        '-f', "$dir/script.sql", '-h', $node->host, '-p', $node->port, $o{db} // 'postgres');
    my ($out, $err) = ('', '');
    my $h = IPC::Run::start(\@cmd, '>', \$out, '2>', \$err);
    $h->{outbox_out} = \$out;
    $h->{outbox_err} = \$err;
    return $h;
}

# The scenario's last word: produced (event_ids committed), received (event_ids that arrived,
# repeats included), dead (event_ids expected in the dead letters, accounted for). Asserts that
# nothing is lost and prints "FAULT <name>: produced N, received M distinct, lost L,
# duplicates D". Received ids that were never produced are reported (unexpected => n allows
# that many, e.g. commits a failed-over primary never replicated).
sub fault_summary {
    my ($name, %o) = @_;
    my %produced = map { $_ => 1 } @{ $o{produced} };
    my %got;
    $got{$_}++ for @{ $o{received} };
    my %dead = map { $_ => 1 } @{ $o{dead} // [] };
    my @lost = grep { !$got{$_} && !$dead{$_} } keys %produced;
    my $distinct = grep { $produced{$_} } keys %got;
    my $duplicates = 0;
    $duplicates += $got{$_} - 1 for keys %got;
    my @unexpected = grep { !$produced{$_} } keys %got;
    is(scalar(@lost), 0, "$name: no produced message is lost")
      or diag("lost: " . join(' ', (sort @lost)[0 .. ($#lost < 9 ? $#lost : 9)]));
    cmp_ok(scalar(@unexpected), '<=', $o{unexpected} // 0,
        "$name: no message arrived that was not produced")
      or diag("unexpected: " . join(' ', (sort @unexpected)[0 .. ($#unexpected < 9 ? $#unexpected : 9)]));
    diag(sprintf('FAULT %s: produced %d, received %d distinct, lost %d, duplicates %d',
        $name, scalar(keys %produced), $distinct, scalar(@lost), $duplicates));
    return { produced => scalar(keys %produced), distinct => $distinct, lost => scalar(@lost),
        duplicates => $duplicates, unexpected => scalar(@unexpected) };
}

1;

#-------------------------------------------------------------------------------------------
# RabbitMQ and NATS JetStream (test/tools/rabbitmq_node, nats_node): real servers from
# Debian's packages, run by the test itself on 127.0.0.1, and checked with independent clients
# (pika, nats-py: test/tools/broker_client.py in the test venv).
#-------------------------------------------------------------------------------------------
package OutboxTest;

push @EXPORT, qw(rabbitmq_node nats_node);
# redis (issue 42): test/tools/redis_node, checked with redis-py (test/tools/redis_client.py).
push @EXPORT, qw(redis_node);
sub redis_node { return OutboxTest::BrokerNode->start('redis', @_) }
push @EXPORT, qw(mosquitto_node);  # mqtt kind

sub rabbitmq_node { return OutboxTest::BrokerNode->start('rabbitmq', @_) }
sub nats_node { return OutboxTest::BrokerNode->start('nats', @_) }
# mqtt kind: a mosquitto broker of the test's own (test/tools/mosquitto_node), checked by a
# paho-mqtt subscriber (test/tools/mqtt_client.py).
sub mosquitto_node { return OutboxTest::BrokerNode->start('mosquitto', @_) }
# sqs kind (issue 42): ElasticMQ (test/tools/sqs_node), checked with boto3.
push @EXPORT, qw(sqs_node);
sub sqs_node { return OutboxTest::BrokerNode->start('sqs', @_) }
# sqs kind: moto in server mode (test/tools/moto_node), which verifies Signature Version 4 and IAM
# permissions once its authentication is on (moto_auth); checked with boto3 signing with the
# credentials given to sqs_sign_as. Region "eu-west-1" unless region => R.
push @EXPORT, qw(moto_node);
sub moto_node {
    my (%opts) = @_;
    my $region = delete $opts{region};
    my $self = OutboxTest::BrokerNode->start('moto', %opts);
    $self->{region} = $region // 'eu-west-1';
    return $self;
}

package OutboxTest::BrokerNode;

use IPC::Run;
use JSON::PP;
BEGIN { OutboxTest::prefer_json_xs(__PACKAGE__) }
use Time::HiRes ();
use PostgreSQL::Test::Utils;
use Test::More;

my $venv_python = ($ENV{OUTBOX_TEST_VENV} // '/var/cache/outbox-test/venv') . '/bin/python';

# The run's shared server (test/run_tap.pl starts one of each kind for the files tagged
# "outbox-tap: rabbitmq" or "nats": OUTBOX_SHARED_RABBITMQ, OUTBOX_SHARED_NATS), or one of the
# test's own (a file run without them, or a server with arguments of its own). On the shared
# one each file declares queues and streams of its own names.
sub start {
    my ($class, $kind, %opts) = @_;
    my $work = PostgreSQL::Test::Utils::tempdir();
    my $shared = $ENV{ 'OUTBOX_SHARED_' . uc $kind };
    $shared = undef if @{ $opts{args} // [] };
    $shared = undef if $kind eq 'mosquitto';  # mqtt kind: each file runs its own broker
    my $self = bless { kind => $kind, dir => $shared // "$work/$kind", work => $work,
        shared => defined $shared, args => $opts{args} // [] }, $class;
    $self->up unless $self->{shared};
    $self->{port} = $self->tool('port');
    chomp $self->{port};
    diag("$kind: the shared server of this run (port $self->{port})") if $self->{shared};
    return $self;
}

# Runs test/tools/<kind>_node CMD DIR ARGS; dies on failure; returns stdout.
sub tool {
    my ($self, $cmd, @args) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run(["$root/test/tools/$self->{kind}_node", $cmd, $self->{dir}, @args],
        '>', \$out, '2>', \$err, IPC::Run::timeout(180))
      or die "$self->{kind}_node $cmd failed: $err$out";
    return $out;
}

sub port { $_[0]{port} }
sub dir { $_[0]{dir} }

# The destination address: amqp://guest:guest@127.0.0.1:P (vhost "/") or nats://127.0.0.1:P.
sub url {
    my ($self) = @_;
    return "127.0.0.1:$self->{port}" if $self->{kind} eq 'redis';    # redis: "server"
    return "http://127.0.0.1:$self->{port}" if $self->sqs_like;    # sqs kind (issue 42)
    return $self->{kind} eq 'rabbitmq' ? "amqp://guest:guest\@127.0.0.1:$self->{port}"
      : "nats://127.0.0.1:$self->{port}";
}

# redis (issue 42): test/tools/redis_client.py (redis-py) with the test venv's python.
sub redis_client {
    my ($self, $cmd, @args) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run([$venv_python, "$root/test/tools/redis_client.py", $cmd, '--port', $self->{port},
            @args], '>', \$out, '2>', \$err, IPC::Run::timeout(300))
      or die "redis_client.py $cmd @args failed: $err";
    return $out;
}

# Start (again): same port, same data.
sub up { my ($self) = @_; $self->tool('start', @{ $self->{args} }); }
# Stop the server process (an outage as clients see it: connections closed, then refused).
sub down { $_[0]->tool('stop') }

# broker_client.py with the test venv's python; returns stdout. moto's sqs-* calls are signed
# for the server's region with the credentials of sqs_sign_as.
sub client {
    my ($self, @args) = @_;
    my ($out, $err) = ('', '');
    my @sign;
    if ($self->{kind} eq 'moto' && $args[0] =~ /^sqs-/) {
        my $c = $self->{credentials} // {};
        @sign = ('--region', $self->{region},
            map { defined $c->{ $_->[1] } ? ($_->[0], $c->{ $_->[1] }) : () }
              [ '--access-key', 'access_key_id' ], [ '--secret-key', 'secret_access_key' ],
              [ '--session-token', 'session_token' ]);
    }
    IPC::Run::run([$venv_python, "$root/test/tools/broker_client.py", @args, @sign,
            '--port', $self->{port}], '>', \$out, '2>', \$err, IPC::Run::timeout(300))
      or die "broker_client.py @args failed: $err";
    return $out;
}

# sqs kind: whether this is an SQS server (ElasticMQ, or moto).
sub sqs_like { $_[0]{kind} eq 'sqs' || $_[0]{kind} eq 'moto' }

# moto: the credentials (a hash as sqs_principal returns) boto3 signs with from now on; undef:
# any (which moto takes while its authentication is off).
sub sqs_sign_as { $_[0]{credentials} = $_[1] }

# moto: an IAM user $name (role => 1: a role, assumed through moto's STS) allowed to send to
# and read the queues @$queues, created while authentication is off; its credentials
# {access_key_id, secret_access_key[, session_token]}.
sub sqs_principal {
    my ($self, $name, $queues, %o) = @_;
    return decode_json($self->client('sqs-principal', '--name', $name, '--queue', @$queues,
        ($o{role} ? ('--role') : ())));
}

# moto: authentication on (every request from now on is verified) or off.
sub moto_auth {
    my ($self, $on) = @_;
    $self->client('moto-auth', '--after', $on ? '0' : 'inf');
}

# moto: the signed requests it has answered so far (test/tools/moto_server.py).
sub moto_requests {
    my ($self) = @_;
    my @got;
    open my $fh, '<', "$self->{dir}/requests.jsonl" or return [];
    while (my $line = <$fh>) {
        push @got, decode_json($line) if $line =~ /\n\z/;
    }
    close $fh;
    return \@got;
}

# RabbitMQ: a durable exchange (type topic unless given) and a durable queue bound to it.
sub amqp_setup {
    my ($self, %o) = @_;
    $self->client('amqp-setup', '--exchange', $o{exchange} // '', '--type', $o{type} // 'topic',
        '--queue', $o{queue} // '', (defined $o{max_length} ? ('--max-length', $o{max_length}) : ()),
        ($o{bind} ? ('--bind', @{ $o{bind} }) : ()));
}

# NATS: a JetStream stream on the subjects.
sub nats_stream {
    my ($self, $stream, @subjects) = @_;
    my %o = ref $subjects[-1] eq 'HASH' ? %{ pop @subjects } : ();
    $self->client('nats-stream', '--stream', $stream, '--subject', @subjects,
        (defined $o{max_msgs} ? ('--max-msgs', $o{max_msgs}) : ()),
        (defined $o{max_msg_size} ? ('--max-msg-size', $o{max_msg_size}) : ()));
}

# sqs kind (issue 42): a queue (a FIFO queue when the name ends in ".fifo"); its URL.
sub sqs_queue {
    my ($self, $queue, %o) = @_;
    my $url = $self->client('sqs-create', '--queue', $queue,
        (defined $o{max_size} ? ('--max-size', $o{max_size}) : ()));
    chomp $url;
    return $url;
}

# The config of an sqs destination on this server's queue $queue, %extra merged in (JSON).
sub sqs_config {
    my ($self, $queue, %extra) = @_;
    return JSON::PP->new->canonical->encode({ queue_url => "$self->{queue_urls}{$queue}",
        region => $self->{region} // 'elasticmq', access_key_id => 'outbox',
        secret_access_key => 'outbox-secret', %extra });
}

sub nats_delete_stream {
    my ($self, $stream) = @_;
    $self->client('nats-delete', '--stream', $stream);
}

# Everything received so far from a queue (RabbitMQ) or a stream (NATS): what arrived since the
# last call is drained (and acknowledged) into a file, which keeps all of it; the list of
# every message received, repeats included (hashes as in broker_client.py).
sub received {
    my ($self, $name, %o) = @_;
    return $self->mqtt_received($name, %o) if $self->{kind} eq 'mosquitto';  # mqtt kind
    my $file = "$self->{work}/received-$name.jsonl";
    # redis: the entries of the stream, in stream order, their fields as "headers".
    return $self->redis_received($name, $file) if $self->{kind} eq 'redis';
    $self->client($self->{kind} eq 'rabbitmq' ? ('amqp-drain', '--queue', $name)
        : $self->sqs_like ? ('sqs-drain', '--queue', $name)
        : ('nats-drain', '--stream', $name), '--out', $file,
        '--idle', $o{idle} // ($self->sqs_like ? 1 : 0.5),
        # sqs: threads => 1 reads a queue in its order (each batch deleted before the next)
        (defined $o{threads} ? ('--threads', $o{threads}) : ()));
    my @got;
    open my $fh, '<', $file or return [];
    while (my $line = <$fh>) {
        push @got, decode_json($line);
    }
    close $fh;
    return \@got;
}

sub redis_received {
    my ($self, $name, $file) = @_;
    $self->redis_client('drain', '--stream', $name, '--out', $file);
    my @got;
    open my $fh, '<', $file or return [];
    while (my $line = <$fh>) {
        my $m = decode_json($line);
        $m->{headers} = $m->{fields};
        push @got, $m;
    }
    close $fh;
    return \@got;
}

# The header (redis: field) that carries the event id.
sub id_header {
    my ($self) = @_;
    return { rabbitmq => 'cloudEvents:id', nats => 'ce-id', redis => 'ce_id', sqs => 'ce-id',
        moto => 'ce-id', mosquitto => 'id' }->{ $self->{kind} };  # mqtt: the user property
}

# The event ids received (cloudEvents:id / ce-id / ce_id), repeats included.
sub event_ids {
    my ($self, $name) = @_;
    my $key = $self->id_header;
    return [ map { $_->{headers}{$key} // () } @{ $self->received($name) } ];
}

# Prepares a queue (RabbitMQ: durable queue $dest bound to exchange "outbox" with routing key
# $dest) or a stream (NATS: stream uc($dest) on "$dest.>") for destination $dest, and returns
# the destination's config as JSON, with %extra merged in.
sub prepare {
    my ($self, $dest, %extra) = @_;
    my %config;
    return $self->mqtt_prepare($dest, %extra) if $self->{kind} eq 'mosquitto';  # mqtt kind
    if ($self->{kind} eq 'sqs') {
        # sqs kind (issue 42): queue $dest, or the FIFO queue "$dest.fifo" for per-key order.
        my $queue = $self->container($dest, %extra);
        $self->{queue_urls}{$queue} = $self->sqs_queue($queue);
        return $self->sqs_config($queue, %extra);
    } elsif ($self->{kind} eq 'redis') {
        # A stream of its own (the shared server outlives a file run twice), and the ACL user of
        # redis_node (AUTH), allowed on the tests' stream names.
        $self->redis_client('exec', 'DEL', $dest);
        %config = (server => $self->url, stream => $dest, user => 'outbox',
            password => 'outbox-secret');
    } elsif ($self->{kind} eq 'rabbitmq') {
        $self->amqp_setup(exchange => 'outbox', queue => $dest, bind => [$dest]);
        %config = (url => $self->url, exchange => 'outbox', routing_key => $dest);
    } else {
        $self->nats_stream(uc $dest, "$dest.>");
        %config = (servers => $self->url, subject => "$dest.msg");
    }
    return JSON::PP->new->canonical->encode({ %config, %extra });
}

# Where destination $dest's messages are read back (see prepare).
sub container {
    my ($self, $dest, %extra) = @_;
    return $dest if $self->{kind} eq 'mosquitto';  # mqtt kind
    if ($self->{kind} eq 'sqs') {    # sqs kind (issue 42)
        $self->{fifo}{$dest} = 1 if $extra{ordering};
        return $self->{fifo}{$dest} ? "$dest.fifo" : $dest;
    }
    return $self->{kind} eq 'nats' ? uc $dest : $dest;
}

# The destination kind this server is for.
sub destination_kind {
    { rabbitmq => 'amqp', nats => 'nats', redis => 'redis', mosquitto => 'mqtt', sqs => 'sqs',
      moto => 'sqs' }
        ->{ $_[0]{kind} }
}

# Messages the server holds in a queue / stream now.
sub count {
    my ($self, $name) = @_;
    return scalar(@{ $self->mqtt_received($name) }) if $self->{kind} eq 'mosquitto';  # mqtt kind
    if ($self->{kind} eq 'redis') {
        my $n = $self->redis_client('count', '--stream', $name);
        chomp $n;
        return $n;
    }
    my $n = $self->client($self->{kind} eq 'rabbitmq' ? ('amqp-count', '--queue', $name)
        : $self->sqs_like ? ('sqs-count', '--queue', $name)
        : ('nats-count', '--stream', $name));
    chomp $n;
    return $n;
}

# The test's own server is stopped; the shared one keeps running (test/run_tap.pl stops it
# after its last user, and starts it again after a file that stopped it).
sub stop {
    my ($self) = @_;
    return if $self->{stopped} || $self->{shared};
    $_->kill_kill for values %{ $self->{subscribers} // {} };  # mqtt kind
    eval { $self->tool('kill') };
    $self->{stopped} = 1;
}

# ---- mqtt kind ------------------------------------------------------------------------------
# A persistent-session paho-mqtt subscriber on "$dest/#" (QoS 1), started before anything is
# published to it and running until the broker node stops, through broker restarts; and the
# destination's config: the broker at 127.0.0.1, default topic "$dest/msg", %extra merged in.
# $extra{subscriber} (user => U, password => P) authenticates the subscriber.
sub mqtt_prepare {
    my ($self, $dest, %extra) = @_;
    my $auth = delete $extra{subscriber};
    $self->mqtt_subscribe($dest, "$dest/#", $auth);
    my %config = (host => '127.0.0.1', port => $self->{port} + 0, topic => "$dest/msg");
    return JSON::PP->new->canonical->encode({ %config, %extra });
}

sub mqtt_subscribe {
    my ($self, $name, $filter, $auth) = @_;
    my $file = "$self->{work}/mqtt-$name.jsonl";
    unlink "$file.ready";
    $self->{subscribers}{$name} = IPC::Run::start(['/usr/bin/python3',
            "$root/test/tools/mqtt_client.py", 'subscribe', '--port', $self->{port},
            '--topic', $filter, '--id', "verify-$name", '--out', $file,
            ($auth ? ('--user', $auth->{user}, '--password', $auth->{password}) : ())],
        '<', \undef, '>>', "$file.log", '2>>', "$file.log");
    for (1 .. 300) {
        return if -e "$file.ready";
        Time::HiRes::sleep(0.1);
    }
    die "mqtt_client.py subscribe $filter did not subscribe; see $file.log";
}

# Everything the subscriber of $name received, repeats included, once it has received nothing
# more for $o{idle} seconds (0.5 unless given).
sub mqtt_received {
    my ($self, $name, %o) = @_;
    my $file = "$self->{work}/mqtt-$name.jsonl";
    my $idle = $o{idle} // 0.5;
    my ($size, $since) = (-1, Time::HiRes::time());
    for (;;) {
        my $now_size = -s $file // 0;
        if ($now_size != $size) {
            ($size, $since) = ($now_size, Time::HiRes::time());
        } elsif (Time::HiRes::time() - $since >= $idle) {
            last;
        }
        Time::HiRes::sleep(0.1);
    }
    my @got;
    open my $fh, '<', $file or return [];
    while (my $line = <$fh>) {
        push @got, decode_json($line) if $line =~ /\n\z/;
    }
    close $fh;
    return \@got;
}
# ---- end of the mqtt kind -------------------------------------------------------------------

sub DESTROY { my $self = shift; $self->stop; }

1;
