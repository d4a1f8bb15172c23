# Real Apache Kafka, what the broker refuses, against what README promises ("a permanent
# failure ... goes to the dead letters at once, with the reason"), each followed by the fix
# and outbox.requeue delivering the message:
#   - a topic that does not exist, with auto.create.topics.enable=false;
#   - a message over the topic's max.message.bytes, and small messages that librdkafka
#     batches beyond it (the broker checks the batch; the fix is batch.size);
#   - a principal denied WRITE on the topic by a DENY ACL (allowed elsewhere), and a
#     principal with no WRITE anywhere (the idempotent producer's InitProducerId fails).
# outbox-tap: kafka-cluster shared
use strict;
use warnings;
use JSON::PP;
use OutboxKafka;
use OutboxTest;
use Test::More;

my $kafka = kafka_cluster();
$kafka->create_topic('small', partitions => 1, config => { 'max.message.bytes' => 1024 });
$kafka->create_topic([ 'forbidden', 'readonly' ], partitions => 2);
# The test's own statements carry the SASL passwords: log none (README: pass them as bind
# parameters); what the relay logs is checked at the end.
my $node = outbox_node('realkafka_rejections', conf => "log_statement = 'none'");

sub sql { $node->safe_psql('postgres', $_[0]) }
sub destination {
    my ($name, $config) = @_;
    my $json = JSON::PP->new->canonical->encode({ 'max_attempts' => 5, 'retry_base' => '200ms',
        %$config });
    sql("SELECT outbox.create_destination('$name', 'kafka', \$cfg\$$json\$cfg\$)");
}
sub sasl {
    my ($user) = @_;
    return ('bootstrap.servers' => $kafka->sasl_bootstrap, 'security.protocol' => 'SASL_SSL',
        'sasl.mechanisms' => 'PLAIN', 'sasl.username' => $user,
        'sasl.password' => $kafka->password($user), 'ssl.ca.location' => $kafka->ca_file);
}
sub dead {   # reason|attempts|last_error of the dead letters of a destination, by id
    my ($dest) = @_;
    return [ split /\n/, sql("SELECT reason || '|' || attempts || '|' || last_error
                                FROM outbox.dead_letters WHERE destination = '$dest' ORDER BY id") ];
}
# What each destination should have delivered, checked against the topics at the end with one
# read (a JVM start is seconds on a loaded machine).
my %expect;   # topic => [keys]
sub requeue_and_deliver {
    my ($dest, $topic, $count, $what, @keys) = @_;
    is(sql("SELECT outbox.requeue('$dest')"), $count, "$dest: requeue moves the $count back");
    ok(wait_until(sub { queued($node, $dest) == 0 }, 60), "$dest: $what, they are delivered")
      or diag(explain(stats_row($node, $dest)), explain(dead($dest)));
    is(scalar(@{ dead($dest) }), 0, "$dest: no dead letter left") or diag(explain(dead($dest)));
    push @{ $expect{$topic} }, @keys ? @keys : map { "$dest-$_" } 1 .. $count;
}

# 1. A topic that does not exist: the broker answers UNKNOWN_TOPIC_OR_PART (nothing creates
#    it); librdkafka reports it once topic.metadata.propagation.max.ms has passed, which the
#    relay keeps below message.timeout.ms (else the message would time out: an outage).
destination('missing', { 'bootstrap.servers' => $kafka->bootstrap, topic => 'no-such-topic' });
produce($node, 'missing', 1, 3, key => 'missing-', pad => 10);
ok(wait_until(sub { @{ dead('missing') } == 3 }, 60), 'unknown topic: the 3 messages are dead-lettered')
  or diag(explain(stats_row($node, 'missing')));
like($_, qr/^rejected\|1\|UNKNOWN_TOPIC_OR_PART: /, 'unknown topic: rejected on the first attempt, the broker\'s error named')
  for @{ dead('missing') };
like(stats_row($node, 'missing')->{last_error}, qr/UNKNOWN_TOPIC_OR_PART/, 'unknown topic: stats() shows it');
$kafka->create_topic('no-such-topic', partitions => 2);
requeue_and_deliver('missing', 'no-such-topic', 3, 'once the topic is created');

# 2. Over max.message.bytes: one message of 3,000 bytes for a topic that takes 1,024.
destination('small', { 'bootstrap.servers' => $kafka->bootstrap, topic => 'small' });
produce($node, 'small', 1, 1, key => 'small-', pad => 3000);
ok(wait_until(sub { @{ dead('small') } == 1 }, 60), 'too large: dead-lettered');
like(dead('small')->[0], qr/^rejected\|1\|MSG_SIZE_TOO_LARGE: /, 'too large: at once, MSG_SIZE_TOO_LARGE named');
sql("INSERT INTO outbox.messages (destination, key, payload) VALUES ('small', 'after', '{\"n\": 0}')");
ok(wait_until(sub { queued($node, 'small') == 0 }, 30), 'a small message after it is delivered');
push @{ $expect{small} }, 'after';
sql("DELETE FROM outbox.dead_letters WHERE destination = 'small'");

# 3. Small messages, each far below the limit, committed together: librdkafka puts them in one
#    batch (batch.size is 1,000,000 bytes by default) and the broker refuses the whole batch
#    as MSG_SIZE_TOO_LARGE. They are dead-lettered with a hint; batch.size fixes it.
produce($node, 'small', 1, 20, key => 'small-', pad => 200);
ok(wait_until(sub { queued($node, 'small') == 0 }, 60), 'batched: every message has an outcome');
my $batched = dead('small');
cmp_ok(scalar(@$batched), '>', 0, scalar(@$batched) . ' of 20 small messages were refused as one batch');
like($_, qr/^rejected\|1\|MSG_SIZE_TOO_LARGE: .*batch\.size/, 'batched: the reason names batch.size')
  for @$batched[0 .. 0];
my $n_batched = scalar(@$batched);
my @batched_keys = split /\n/, sql("SELECT key FROM outbox.dead_letters WHERE destination = 'small'");
sql(q{SELECT outbox.alter_destination('small', '{"batch.size": 1000}')});
requeue_and_deliver('small', 'small', $n_batched, 'with batch.size below max.message.bytes', @batched_keys);

# 4. A DENY WRITE ACL on the topic for a principal that may write elsewhere: the produce is
#    refused with TOPIC_AUTHORIZATION_FAILED.
$kafka->acl('add', principal => 'User:outbox', operations => [ 'Write', 'Describe' ], topic => '*');
$kafka->acl('add', principal => 'User:outbox', operations => ['Write'], topic => 'forbidden', deny => 1);
destination('forbidden', { sasl('outbox'), topic => 'forbidden' });
produce($node, 'forbidden', 1, 3, key => 'forbidden-', pad => 10);
ok(wait_until(sub { @{ dead('forbidden') } == 3 }, 60), 'denied WRITE: the 3 messages are dead-lettered')
  or diag(explain(stats_row($node, 'forbidden')));
like($_, qr/^rejected\|1\|TOPIC_AUTHORIZATION_FAILED: /, 'denied WRITE: at once, TOPIC_AUTHORIZATION_FAILED named')
  for @{ dead('forbidden') };
$kafka->acl('remove', principal => 'User:outbox', operations => ['Write'], topic => 'forbidden', deny => 1);
requeue_and_deliver('forbidden', 'forbidden', 3, 'once the DENY ACL is removed');

# 5. A principal that may describe but not write any topic: the idempotent producer cannot
#    get a producer id (CLUSTER_AUTHORIZATION_FAILED, a fatal error for librdkafka). Also a
#    permanent failure: dead letters with the reason, not an endless outage.
$kafka->acl('add', principal => 'User:reader', operations => ['Describe'], topic => '*');
destination('readonly', { sasl('reader'), topic => 'readonly' });
produce($node, 'readonly', 1, 3, key => 'readonly-', pad => 10);
ok(wait_until(sub { @{ dead('readonly') } == 3 }, 60), 'no WRITE anywhere: the 3 messages are dead-lettered')
  or diag(explain(stats_row($node, 'readonly')));
like($_, qr/^rejected\|1\|CLUSTER_AUTHORIZATION_FAILED: .*WRITE/, 'no WRITE anywhere: at once, CLUSTER_AUTHORIZATION_FAILED and what to grant named')
  for @{ dead('readonly') };
$kafka->acl('add', principal => 'User:reader', operations => ['Write'], topic => 'readonly');
requeue_and_deliver('readonly', 'readonly', 3, 'once WRITE is granted');

# Kafka's Java consumer finds every message the requeues delivered in its topic.
my %in;
$in{ $_->{topic} }{ $_->{key} }++ for @{ $kafka->consume([ sort keys %expect ]) };
for my $topic (sort keys %expect) {
    my @missing = grep { !$in{$topic}{$_} } @{ $expect{$topic} };
    is(scalar(@missing), 0, "topic $topic has the " . scalar(@{ $expect{$topic} }) . ' messages delivered to it')
      or diag("missing: @missing");
}
is(sql('SELECT count(*) FROM outbox.messages'), '0', 'nothing left queued');
is(sql('SELECT count(*) FROM outbox.dead_letters'), '0', 'no dead letter left');
# Nothing leaked the SASL passwords.
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
for my $user ('outbox', 'reader') {
    my $pw = $kafka->password($user);
    unlike($log, qr/\Q$pw\E/, "the server log does not contain $user\'s password");
    unlike(sql('SELECT coalesce(string_agg(last_error, \' \'), \'\') FROM outbox.stats()'), qr/\Q$pw\E/,
        "stats() does not show $user\'s password");
}

$node->stop;
check_server_log($node);
$kafka->stop;
done_testing();
