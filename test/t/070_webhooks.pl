# Webhook delivery against a real local HTTP server, checked against the sink's own record:
# retries until success with every signature verified independently, permanent failures and
# requeue, an endpoint that refuses connections for 20 s, Retry-After, and fan-out to Kafka and
# two webhooks across a worker kill. (Isolation of a hanging endpoint, which asserts a time:
# test/t/072.)
use strict;
use warnings;
use Digest::SHA qw(hmac_sha256_base64);
use IO::Socket::INET;
use MIME::Base64 qw(decode_base64);
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
my $key = decode_base64(substr($secret, 6));
my $sink = webhook_sink();
my $node = outbox_node('webhooks', test_switches => 1, conf => join("\n", 'restart_after_crash = on',
    "outbox.retry_base = '50ms'", "outbox.retry_max = '500ms'", "outbox.lease_timeout = '10s'"));

# This file's webhook destinations sign with $secret and send a static header.
sub hook {
    my ($name, $path, %extra) = @_;
    $sink->create_destination($node, $name, $path, secret => $secret, headers => { 'x-static' => 'yes' }, %extra);
}

# 1. 1,000 messages to an endpoint that fails the first two attempts of every id.
my $flaky = '/flaky;fail_first=2;fail_status=503';
hook('flaky', $flaky, max_attempts => 5);
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload, headers)
    SELECT 'flaky', 'order.created', 'k' || g, jsonb_build_object('n', g), '{"x-trace": "t1"}'
      FROM generate_series(1, 1000) g});
ok(wait_until(sub { queued($node) eq '0' }, 120), 'all 1,000 delivered in the end');
my $reqs = $sink->requests_for($flaky);
my (%attempts, %ids, @bad_sig, @bad_hdr);
for my $r (@$reqs) {
    my $h = $r->{headers};
    my $id = $h->{'webhook-id'};
    push @{ $attempts{$id} }, $r->{status};
    my $signed = "$id.$h->{'webhook-timestamp'}." . decode_base64($r->{body_b64});
    my $mac = hmac_sha256_base64($signed, $key);
    $mac .= '=' while length($mac) % 4;   # Digest::SHA leaves out the padding
    my $expected = "v1,$mac";
    push @bad_sig, $id unless ($h->{'webhook-signature'} // '') eq $expected;
    push @bad_hdr, "$id: ce-id" unless ($h->{'ce-id'} // '') eq $id;
    push @bad_hdr, "$id: ce-type" unless ($h->{'ce-type'} // '') eq 'order.created';
    push @bad_hdr, "$id: content-type" unless ($h->{'content-type'} // '') eq 'application/json';
    push @bad_hdr, "$id: static" unless ($h->{'x-static'} // '') eq 'yes';
    push @bad_hdr, "$id: producer header" unless ($h->{'x-trace'} // '') eq 't1';
    push @bad_hdr, "$id: ce-specversion" unless ($h->{'ce-specversion'} // '') eq '1.0';
}
is(scalar(keys %attempts), 1000, 'the sink saw 1,000 distinct webhook-ids');
is(scalar(grep { join(',', @{ $attempts{$_} }) ne '503,503,204' } keys %attempts), 0,
    'each was delivered on its third attempt, after two 503s');
is(scalar(@bad_sig), 0, 'every signature verifies with an independent HMAC-SHA256 (3,000 requests)');
is(scalar(@bad_hdr), 0, 'webhook-id equals ce-id, stable across attempts, with the right headers')
  or diag(join("\n", @bad_hdr[0 .. 9]));
is(stats_row($node, 'flaky')->{failed_total}, 2000, 'stats() counts the 2,000 failed attempts');

# 2. Permanent failures: 400 is dead-lettered with the status; a 410 Gone pauses its destination
# instead (test/t/096 has the details); after alter_destination to a good URL, resume and requeue
# deliver them.
hook('gone', '/gone;status=410;body=gone%20for%20good');
hook('badreq', '/badreq;status=400');
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload) SELECT 'gone', jsonb_build_object('n', g) FROM generate_series(1, 5) g;
    INSERT INTO outbox.messages (destination, payload) SELECT 'badreq', jsonb_build_object('n', g) FROM generate_series(1, 5) g});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq '5' }, 30),
    '5 messages dead-lettered');
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT paused FROM outbox.destinations WHERE name = 'gone'}) eq 't' }, 30),
    'the 410s pause their destination');
# The pause is written back with the first 410; the others of the batch may still be leased
# (a leased row counts its attempt until its outcome is written back, refunded here).
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'gone' AND attempts = 0 AND lease_token IS NULL}) eq '5' }, 10),
    'and stay queued, no attempt spent');
like(stats_row($node, 'gone')->{last_error}, qr/^HTTP 410: gone for good; destination paused/,
    'last_error has the status and the first bytes of the response body');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'badreq' AND last_error LIKE 'HTTP 400%'}),
    '5', 'the 400s likewise');
my $good = $sink->url('/good');
$node->safe_psql('postgres', qq{
    SELECT outbox.alter_destination('gone', '{"url": "$good"}');
    SELECT outbox.resume('gone');
    SELECT outbox.requeue('badreq')});
ok(wait_until(sub { scalar(@{ $sink->requests_for('/good') }) == 5 }, 30), 'after alter_destination, resume delivers the 410s');
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'badreq'}) eq '5' }, 30),
    'the requeued 400s fail again, back in the dead letters');

# 2b. The same change racing a claim: alter_destination and requeue, in a transaction that began
# before the worker's claim transaction, commit while that transaction holds before claiming
# (the test-only outbox.debug_pause), with the old config loaded. Its claim sees the requeued
# message as due, so it must take nothing under the old config: the message goes to the new
# URL, once.
hook('swap', '/swap_old;status=400');
hook('pacer', '/pacer');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) VALUES ('swap', '{"n": 1}')});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'swap'}) eq '1' }, 30),
    'swap: dead-lettered by its old URL');
$node->append_conf('postgresql.conf',
    "outbox.debug_pause = 'before-claim'\noutbox.debug_pause_ms = 3000\noutbox.poll_interval = '1h'\n");
$node->reload;
# Past the claim transaction the reload itself starts, and its 3 s pause: nothing marks the
# end of a pause (the worker's state does not change during it), so a fixed 4 s.
sleep 4;
my $swap_new = $sink->url('/swap_new');
my $change = $node->background_psql('postgres');
$change->query_safe(qq{BEGIN; SELECT outbox.alter_destination('swap', '{"url": "$swap_new"}'); SELECT outbox.requeue('swap')});
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) VALUES ('pacer', '{"n": 1}')});
ok($node->wait_for_log(qr/outbox: pausing 3000 ms in phase "before-claim"/, $offset),
    'a claim transaction (woken by a commit) holds before claiming');
$change->query_safe('COMMIT');
$change->quit;
ok(wait_until(sub { scalar(@{ $sink->requests_for('/swap_new') }) == 1 }, 30),
    'the message requeued during that claim transaction went to the new URL');
is(scalar(@{ $sink->requests_for('/swap_old;status=400') }), 1, 'and never again to the old one');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'swap'}), '0',
    'nothing of it left in the dead letters');
$node->append_conf('postgresql.conf', "outbox.debug_pause = ''\noutbox.poll_interval = '1s'\n");
ok(reload_and_wait($node, 'outbox.poll_interval', '1s'), 'past the last pause: the worker turns without it');

# 3. Connection refused for 4 s (past the lease, shortened to 3 s for this part), max_attempts 2:
# nothing dead-lettered, all delivered after.
$node->append_conf('postgresql.conf', "outbox.lease_timeout = '3s'\n");
ok(reload_and_wait($node, 'outbox.lease_timeout', '3s'), 'the worker has read the 3 s lease');
my $probe = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1) or die $!;
my $late_port = $probe->sockport;
close $probe;
my $late_url = "http://127.0.0.1:$late_port/late";
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('late', 'webhook', '{"url": "$late_url", "max_attempts": 2}');
    INSERT INTO outbox.messages (destination, payload) SELECT 'late', jsonb_build_object('n', g) FROM generate_series(1, 50) g});
sleep 4;   # the outage, past the lease: its length is the scenario
my $s = stats_row($node, 'late');
is($s->{dead}, 0, 'after 4 s of refused connections (past the lease) nothing is dead-lettered');
is($s->{failed_total}, 0, 'and no attempt was spent');
like($s->{last_error} // '', qr/unreachable/, 'last_error says the endpoint is unreachable');
my $late_sink = webhook_sink(port => $late_port);
ok(wait_until(sub { scalar(grep { $_->{path} eq '/late' } @{ $late_sink->requests }) >= 50 }, 60),
    'once the endpoint listens, all 50 are delivered');
is(stats_row($node, 'late')->{dead}, 0, 'none dead-lettered');
$late_sink->stop;
$node->append_conf('postgresql.conf', "outbox.lease_timeout = '10s'\n");
ok(reload_and_wait($node, 'outbox.lease_timeout', '10s'), 'the lease is 10 s again');

# 4. Retry-After: 2 is honoured.
my $ra = '/ra;fail_first=1;fail_status=429;retry_after=2';
hook('ra', $ra, retry_max => '10s');   # Retry-After is capped by retry_max
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) SELECT 'ra', jsonb_build_object('n', g) FROM generate_series(1, 5) g});
ok(wait_until(sub { scalar(grep { $_->{status} == 204 } @{ $sink->requests_for($ra) }) == 5 }, 30), 'Retry-After: all 5 delivered');
my %by_id;
push @{ $by_id{ $_->{headers}{'webhook-id'} } }, $_->{t} for @{ $sink->requests_for($ra) };
my @gaps = map { $by_id{$_}[1] - $by_id{$_}[0] } keys %by_id;
is(scalar(grep { $_ < 1.95 } @gaps), 0, 'no retry came sooner than Retry-After: 2')
  or diag("gaps: @gaps");

# 5. Fan-out to Kafka and two webhooks, one failing for good, with a worker kill mid-way.
my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('fan_kafka', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "fan"}');
    SELECT outbox.pause('fan_kafka')});
hook('fan_hook', '/fan_hook');
hook('fan_bad', '/fan_bad;status=400');
$node->safe_psql('postgres', q{SELECT outbox.pause('fan_hook'); SELECT outbox.pause('fan_bad')});
my @events = split /\n/, $node->safe_psql('postgres', q{
    SELECT outbox.publish(ARRAY['fan_kafka', 'fan_hook', 'fan_bad'], 'fan.out', jsonb_build_object('n', g))
      FROM generate_series(1, 300) g});
is(scalar(@events), 300, '300 events published to 3 destinations each');
$node->safe_psql('postgres', q{SELECT outbox.resume('fan_kafka'); SELECT outbox.resume('fan_hook'); SELECT outbox.resume('fan_bad')});
ok(wait_until(sub { scalar(@{ $sink->requests_for('/fan_hook') }) > 30 }, 30), 'fan-out under way');
my ($pid) = worker_pids($node);
ok(kill('KILL', $pid), "worker $pid killed mid-way");
ok(wait_until(sub { my $q = eval { queued($node) }; defined $q && $q eq '0' }, 120), 'all three destinations done after the restart');
my %kafka = map { $_->{headers}{ce_id} => 1 } @{ $broker->consume('fan.out') };  # the message's topic
my %hook = map { $_->{headers}{'webhook-id'} => 1 } grep { $_->{status} == 204 } @{ $sink->requests_for('/fan_hook') };
is(scalar(grep { !$kafka{$_} } @events), 0, 'Kafka received every event');
is(scalar(grep { !$hook{$_} } @events), 0, 'the good webhook received every event');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'fan_bad'}), '300',
    'the failing webhook alone has them in the dead letters');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination <> 'fan_bad' AND destination <> 'badreq'}), '0',
    'no other dead letters');

$node->stop;
check_server_log($node, killed => 1);
$broker->stop;
$sink->stop;
done_testing();
