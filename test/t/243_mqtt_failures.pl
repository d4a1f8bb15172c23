# What mosquitto refuses, for the mqtt kind: a message to a topic the broker's ACL does not let
# the relay write is dead-lettered at once with the broker's reason (PUBACK 0x87 Not
# authorized), and so is one above the broker's message_size_limit (0x95 Packet too large); a
# wrong password is an outage, not a rejection (a CONNACK refusal): the messages wait without
# spending an attempt, last_error shows the broker's answer but never the password, and once
# alter_destination sets the right one they are delivered; outbox.requeue brings a dead letter
# back once the ACL allows its topic.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $mqtt = mosquitto_node(args => []);
my $dir = $mqtt->dir;
$mqtt->down;
$mqtt->tool('passwd', 'relay', 'relay-pw');
$mqtt->tool('passwd', 'verifier', 'verifier-pw');
# The relay may write ok/# (and what @more adds), the verifier read everything.
sub write_acl {
    my @more = @_;
    open my $fh, '>', "$dir/acl" or die "$dir/acl: $!";
    print $fh join("\n", 'user relay', 'topic write ok/#', @more, '', 'user verifier', 'topic read #', '');
    close $fh;
}
write_acl();
$mqtt->{args} = ["password_file $dir/passwd", "acl_file $dir/acl", 'message_size_limit 2000'];
$mqtt->up;

my $node = outbox_node('mqtt_failures', conf => "outbox.lease_timeout = '6s'");
my $good = $mqtt->prepare('ok', username => 'relay', password => 'relay-pw',
    subscriber => { user => 'verifier', password => 'verifier-pw' }, max_attempts => 2,
    retry_base => '100ms');
my $bad = $mqtt->prepare('pw', username => 'relay', password => 'wrong-pw', topic => 'ok/pw',
    subscriber => { user => 'verifier', password => 'verifier-pw' });
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('good', 'mqtt', '$good');
    SELECT outbox.create_destination('badpw', 'mqtt', '$bad');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('good', 'warm-up', '{}');
});
ok(wait_until(sub { stats_row($node, 'good')->{delivered_total} == 1 }, 30), 'warm-up delivered');

# Not authorized: the ACL lets the relay write ok/# only.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('good', 'secret/x', 'denied', '{}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('good', 'fine', '{}')});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE key = 'denied'}) eq '1' }, 30),
    'a message to a topic the ACL refuses is dead-lettered');
my ($reason, $error, $attempts) = split /\|/, $node->safe_psql('postgres',
    q{SELECT reason, last_error, attempts FROM outbox.dead_letters WHERE key = 'denied'});
is($reason, 'rejected', 'at once (rejected), not after max_attempts');
like($error, qr/the MQTT broker refused the message to topic secret\/x: 0x87 Not authorized/,
    "last_error has the broker's reason: $error");

# Too large: 3000 bytes above message_size_limit 2000.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    VALUES ('good', 'large', jsonb_build_object('pad', repeat('x', 3000)))});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE key = 'large'}) eq '1' }, 30),
    'a message above the broker\'s message_size_limit is dead-lettered');
($reason, $error) = split /\|/, $node->safe_psql('postgres',
    q{SELECT reason, last_error FROM outbox.dead_letters WHERE key = 'large'});
is($reason, 'rejected', 'at once');
like($error, qr/0x95 Packet too large/, "with the broker's reason: $error");
ok(wait_until(sub { queued($node, 'good') == 0 }, 30), 'the other messages are delivered');
my @topics = map { $_->{topic} } @{ $mqtt->received('ok') };
is(join(',', grep { $_ ne 'ok/pw' } @topics), 'ok/msg,ok/msg', 'the subscriber got warm-up and fine, nothing else');

# A wrong password: a CONNACK refusal (0x86 or 0x87), an outage for the destination.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload) SELECT 'badpw', jsonb_build_object('n', g)
      FROM generate_series(1, 5) g});
ok(wait_until(sub { (stats_row($node, 'badpw')->{last_error} // '') =~ /refused the connection/ }, 30),
    'a wrong password shows the broker\'s answer')
  or diag(explain(stats_row($node, 'badpw')));
my $s = stats_row($node, 'badpw');
# mosquitto answers 0x87 Not authorized to a wrong password (0x86 is the other broker's choice).
like($s->{last_error}, qr/deferred.*refused the connection: 0x8(6 Bad user name or password|7 Not authorized)/,
    "as an outage: $s->{last_error}");
unlike($s->{last_error}, qr/wrong-pw/, 'never the password');
# (attempts counts the probe the driver holds while it waits for the broker: failed_total is
# what says whether an attempt was spent.)
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'badpw'}),
    '5', 'its 5 messages wait');
is(stats_row($node, 'badpw')->{failed_total}, 0, 'no attempt spent on them');
my $fixed = $bad =~ s/wrong-pw/relay-pw/r;
$node->safe_psql('postgres', qq{SELECT outbox.alter_destination('badpw', '$fixed')});
ok(wait_until(sub { queued($node, 'badpw') == 0 }, 60), 'with the right password they are delivered');
is(scalar(grep { $_->{topic} eq 'ok/pw' } @{ $mqtt->received('ok') }), 5, 'all 5 arrived');

# The ACL fixed, the dead letter requeued: delivered.
write_acl('topic write secret/#');
$mqtt->down;
$mqtt->up;
is($node->safe_psql('postgres', q{SELECT outbox.requeue(array_agg(id)) FROM outbox.dead_letters WHERE key = 'denied'}),
    '1', 'the refused message is requeued');
ok(wait_until(sub { stats_row($node, 'good')->{delivered_total} == 3 }, 60),
    'and delivered once the ACL allows its topic')
  or diag(explain(stats_row($node, 'good')));

$node->stop;
check_server_log($node);
$mqtt->stop;
done_testing();
