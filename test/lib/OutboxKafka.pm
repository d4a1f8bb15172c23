# The real-Kafka tier of the TAP suites (test/t/11x_*.pl): a three-broker Apache Kafka 4.x
# KRaft cluster run by test/tools/kafka_cluster, and Kafka's own Java consumer
# (test/tools/KafkaVerify.java) as the independent client that reads back what the relay
# wrote. Everything listens on 127.0.0.1. test/run_tap.pl starts one cluster for all the files
# of a run (OUTBOX_SHARED_KAFKA_CLUSTER); a file run without it starts its own in its temp dir.
# Each file uses topics and principals of its own; one that stops or kills brokers is tagged
# "outbox-tap: kafka-cluster exclusive" and has the cluster to itself.
#
#   my $kafka = kafka_cluster();            # started and healthy
#   $kafka->create_topic('orders', partitions => 8, config => { 'max.message.bytes' => 2048 });
#   my $bs = $kafka->bootstrap;             # PLAINTEXT (a super user)
#   $kafka->kill(2); $kafka->start_broker(2); $kafka->restart(3); $kafka->wait_healthy;
#   my $ids = $kafka->event_ids('orders');  # every ce_id, repeats included
#   my $msgs = $kafka->consume('orders');   # partition, offset, key, headers{ce_id} (, payload)
#   $kafka->transact('t', 'tx-1', 'commit:a,b', 'abort:c');   # Kafka's transactional producer
package OutboxKafka;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(kafka_cluster full_tier sized kafka_librdkafka_version);

my $root = $ENV{OUTBOX_ROOT} // die "OUTBOX_ROOT is not set (run through test/run_tests)";
my $tool = "$root/test/tools/kafka_cluster";
my @started;

# True in `test/run_tests --full`: the real-cluster tests then run at their full sizes.
sub full_tier { return ($ENV{OUTBOX_TEST_FULL} // '') eq '1' }

# $full in the full tier, $reduced in the default run (which CI runs).
sub sized { my ($full, $reduced) = @_; return full_tier() ? $full : $reduced }

# The librdkafka the extension is built against, as a number (2.0.2 -> 20002).
sub kafka_librdkafka_version {
    my $v = `pkg-config --modversion rdkafka 2>/dev/null` // '';
    chomp $v;
    my ($a, $b, $c) = $v =~ /^(\d+)\.(\d+)\.(\d+)/ or die "cannot tell the librdkafka version ('$v')";
    return $a * 10000 + $b * 100 + $c;
}

sub kafka_cluster { return OutboxKafka::Cluster->start(@_) }

# Brokers that outlive a dying test would hold ports and memory: stop every cluster at exit.
END {
    for my $c (@started) {
        eval { $c->stop } if $c;
    }
}

package OutboxKafka::Cluster;

use IPC::Run;
# JSON::XS (libjson-xs-perl) reads 100k messages in a second; JSON::PP needs half a minute.
BEGIN { *decode_json = eval { require JSON::XS; 1 } ? \&JSON::XS::decode_json : \&JSON::PP::decode_json }
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

sub start {
    my ($class, %opts) = @_;
    # The run's shared cluster (test/run_tap.pl starts it once for every file tagged
    # "outbox-tap: kafka-cluster"): this file uses its own topics and principals there, and
    # leaves it running.
    if (my $shared = $ENV{OUTBOX_SHARED_KAFKA_CLUSTER}) {
        my $self = bless { dir => $shared, shared => 1 }, $class;
        $self->{info} = decode_json($self->run(['info']));
        my @down = grep { !$self->{info}{running}{$_} } sort keys %{ $self->{info}{running} };
        die "the shared Kafka cluster in $shared has nodes down: @down\n" if @down;
        Test::More::diag(sprintf('Apache Kafka %s: the shared cluster of this run (%s)',
            $self->{info}{kafka_version}, $self->bootstrap));
        return $self;
    }
    my $dir = PostgreSQL::Test::Utils::tempdir() . '/kafka';
    my $self = bless { dir => $dir }, $class;
    push @started, $self;
    my $t0 = time;
    # --owner: a watchdog kills the brokers if this test dies before it stops them.
    $self->run([ 'start', '--timeout', $opts{timeout} // 300, '--owner', $$ ], 400);
    $self->{info} = decode_json($self->run(['info']));
    Test::More::diag(sprintf('Apache Kafka %s: controller + 3 brokers up and healthy in %.1f s (%s)',
        $self->{info}{kafka_version}, time - $t0, $self->bootstrap));
    return $self;
}

# Runs one kafka_cluster command; dies with its output unless it succeeds. Returns stdout.
sub run {
    my ($self, $args, $timeout) = @_;
    my ($out, $err) = ('', '');
    my $ok = eval {
        IPC::Run::run([ $tool, '--dir', $self->{dir}, @$args ], '<', \undef, '>', \$out, '2>', \$err,
            IPC::Run::timeout($timeout // 180));
    };
    die "kafka_cluster @$args: " . ($@ || "exit $?") . "\n$err$out" unless $ok;
    $self->{last_err} = $err;
    return $out;
}

sub dir { $_[0]{dir} }
sub bootstrap { $_[0]{info}{bootstrap}{plaintext} }
sub sasl_bootstrap { $_[0]{info}{bootstrap}{sasl_ssl} }
sub ca_file { $_[0]{info}{tls}{ca} }
sub password { my ($self, $user) = @_; return $self->{info}{users}{$user} // die "no user $user" }
sub version { $_[0]{info}{kafka_version} }
sub broker_log { my ($self, $id) = @_; return "$self->{dir}/node$id/server.log" }

# create_topic(NAME | [NAMES], partitions => N, config => { K => V }): created with
# replication factor 3 and fully replicated on return.
sub create_topic {
    my ($self, $names, %o) = @_;
    my @cfg = map { ('--config', "$_=$o{config}{$_}") } sort keys %{ $o{config} // {} };
    $self->run([ 'create-topic', (ref $names ? @$names : $names), '--partitions', $o{partitions} // 4, @cfg ]);
}

# acl('add'|'remove', principal => 'User:x', operations => [...], topic => T | cluster => 1,
#     deny => 1, prefixed => 1)
sub acl {
    my ($self, $action, %o) = @_;
    $self->run([ 'acl', $action, '--principal', $o{principal},
        (map { ('--operation', $_) } @{ $o{operations} }),
        (defined $o{topic} ? ('--topic', $o{topic}) : ()), ($o{cluster} ? '--cluster' : ()),
        ($o{deny} ? '--deny' : ()), ($o{prefixed} ? '--prefixed' : ()) ]);
}

# kill -9 of one broker, sent from here at once: starting the tool takes a second or more on a
# loaded machine, and a drain moves on by tens of thousands of messages meanwhile. Then waits
# until the JVM is gone (its ports and data directory free), as the tool does.
sub kill {
    my ($self, $id) = @_;
    my $node = "$self->{dir}/node$id";
    my $pid = eval { PostgreSQL::Test::Utils::slurp_file("$node/pid") } // '';
    chomp $pid;
    my $cmdline = $pid =~ /^\d+$/ ? eval { PostgreSQL::Test::Utils::slurp_file("/proc/$pid/cmdline") } // '' : '';
    if (index($cmdline, "$node/server.properties") >= 0) {
        CORE::kill('KILL', $pid);
        my $deadline = time + 10;
        while (time < $deadline) {
            my $stat = eval { PostgreSQL::Test::Utils::slurp_file("/proc/$pid/stat") };
            last if !defined $stat || $stat =~ /\) Z /;
            Time::HiRes::sleep(0.05);
        }
    }
    $self->run([ 'kill', $id ]);
}
sub stop_broker { my ($self, $id) = @_; $self->run([ 'stop', $id ], 120) }

# Starts one stopped broker and waits until it is registered and every replica is in sync.
sub start_broker {
    my ($self, $id, %o) = @_;
    $self->run([ 'start', $id, '--timeout', $o{timeout} // 240 ], 300);
}

# Clean restart (controlled shutdown) of one broker, back in sync when it returns.
sub restart {
    my ($self, $id, %o) = @_;
    $self->run([ 'restart', $id, '--timeout', $o{timeout} // 240, ($o{kill} ? '--kill' : ()) ], 400);
}

sub wait_healthy {
    my ($self, %o) = @_;
    $self->run([ 'wait-healthy', '--timeout', $o{timeout} // 120,
        (defined $o{brokers} ? ('--brokers', $o{brokers}) : ()) ], ($o{timeout} // 120) + 90);
}

sub running {
    my ($self) = @_;
    my $info = decode_json($self->run(['info']));
    return { map { $_ => $info->{running}{$_} ? 1 : 0 } keys %{ $info->{running} } };
}

sub leader {
    my ($self, $topic, $partition) = @_;
    my $out = $self->run([ 'leader', $topic, $partition ], 60);
    chomp $out;
    return $out;
}

sub verify {
    my ($self, @args) = @_;
    my $out = $self->run([ 'verify', @args ], 900);
    my ($summary) = ($self->{last_err} // '') =~ /^summary (.*)$/m;
    $self->{summary} = { map { split /=/ } split / /, $summary // '' };
    return $out;
}

# The summary KafkaVerify printed for the last consume: messages, distinct, duplicates,
# no_ce_id, partitions, keys, keys_on_several_partitions, out_of_order_partitions.
sub summary { $_[0]{summary} }

# Every message of a topic (or of several: [TOPICS]), read by Kafka's Java consumer from the
# start up to the end offsets: hashes with topic, partition, offset, key and headers{ce_id};
# with headers => 1 every header, with values => 1 the payload too (the field names of kcat -J).
sub consume {
    my ($self, $topics, %o) = @_;
    my @t = map { ('--topic', $_) } ref $topics ? @$topics : ($topics);
    # read_committed => 1: only what committed transactions hold (isolation.level).
    push @t, '--property', 'isolation.level=read_committed' if $o{read_committed};
    my @m;
    if ($o{headers} || $o{values}) {
        my $out = $self->verify('consume', '--bootstrap', $self->bootstrap, @t,
            '--format', 'json', ($o{values} ? '--values' : ()));
        @m = map { decode_json($_) } grep { /^\{/ } split /\n/, $out;
    } else {
        my $out = $self->verify('consume', '--bootstrap', $self->bootstrap, @t, '--format', 'tsv');
        for (split /\n/, $out) {
            my ($topic, $p, $off, $id, $key) = split /\t/;
            push @m, { topic => $topic, partition => $p, offset => $off,
                key => ($key eq '\N' ? undef : $key), headers => { ce_id => $id } };
        }
    }
    return \@m;
}

# Every ce_id header of a topic (one per message received, repeats included).
sub event_ids {
    my ($self, $topic, %o) = @_;
    my $out = $self->verify('consume', '--bootstrap', $self->bootstrap, '--topic', $topic,
        '--format', 'ids',
        ($o{read_committed} ? ('--property', 'isolation.level=read_committed') : ()));
    return [ grep { $_ ne '\N' } split /\n/, $out ];
}

# transact(TOPIC, TRANSACTIONAL_ID, 'commit:ID,ID', 'abort:ID,ID', ...): Kafka's own
# transactional producer writes each batch as one transaction, in order, each record keyed and
# ce_id'd by its ID with the value {"id":"ID"}, and commits or aborts it (the aborted records
# are in the log, under an abort marker). Returns "committed=N aborted=N".
sub transact {
    my ($self, $topic, $transactional_id, @batches) = @_;
    my $out = $self->run([ 'verify', 'transact', '--bootstrap', $self->bootstrap, '--topic', $topic,
        '--transactional-id', $transactional_id, map { ('--batch', $_) } @batches ], 300);
    chomp $out;
    return $out;
}

sub end_offset_sum {
    my ($self, $topic) = @_;
    my $out = $self->run([ 'verify', 'offsets', '--bootstrap', $self->bootstrap, '--topic', $topic ]);
    my ($sum) = $out =~ /^sum=(\d+)$/m;
    return $sum;
}

# Stops every node at once (SIGKILL: the data is thrown away with the temp dir). The shared
# cluster keeps running: test/run_tap.pl stops it after its last user (and brings back any
# node a file left stopped before the next one starts).
sub stop {
    my ($self) = @_;
    return if $self->{shared} || $self->{stopped}++;
    eval { $self->run([ 'stop', '--kill' ], 60) };
}

1;
