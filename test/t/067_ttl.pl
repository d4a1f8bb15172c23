# Default expiry ("ttl"): a destination's default expires_at, set at INSERT when the producer
# gives none. Messages queued for a paused destination that stay paused past their ttl are
# dead-lettered as "expired" when it resumes, and the endpoint never sees them (checked in the
# sink's own record); a message whose producer gave a later expires_at is delivered; the
# conservation check balances.
use strict;
use warnings;
use JSON::PP;
use MIME::Base64;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $node = outbox_node('ttl');
my $url = $sink->url('/short');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('short', 'webhook', '{"url": "$url", "ttl": "2s"}');
    SELECT outbox.pause('short');
    SELECT count(*) FROM outbox.stats();  -- the counts start here, before any message
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'short', 'k' || g, jsonb_build_object('n', g) FROM generate_series(1, 20) g;
    INSERT INTO outbox.messages (destination, key, payload, expires_at)
    VALUES ('short', 'kept', '{"n": "kept"}', now() + interval '1 hour');
});
is($node->safe_psql('postgres', q{
    SELECT count(*) FILTER (WHERE expires_at = available_at + interval '2 s') || ' ' ||
           count(*) FILTER (WHERE key = 'kept' AND expires_at > now() + interval '50 min')
      FROM outbox.messages}),
    '20 1', 'the ttl set expires_at of the 20 messages without one; the producer\'s own was kept');

# Paused longer than the ttl, then resumed.
my $deadline = $node->safe_psql('postgres', 'SELECT extract(epoch FROM max(expires_at)) FROM outbox.messages WHERE key <> \'kept\'');
sleep(0.2) while time < $deadline + 0.5;   # expiry goes by the clock: past expires_at
$node->safe_psql('postgres', q{SELECT outbox.resume('short')});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'the queue drains once the destination resumes');
is($node->safe_psql('postgres', q{
    SELECT count(*) || ' ' || string_agg(DISTINCT reason, ',') || ' ' ||
           string_agg(DISTINCT last_error, ',') || ' ' || max(attempts)
      FROM outbox.dead_letters WHERE destination = 'short'}),
    '20 expired expired before it could be delivered 0',
    'the 20 are dead letters with reason expired, no attempt spent');
my @requests = @{ $sink->requests };
is(scalar(@requests), 1, 'the endpoint received exactly one request');
is(($requests[0] && decode_json_body($requests[0])), 'kept', 'and it is the message with its own expires_at');
my $s = stats_row($node, 'short');
is("$s->{pending} $s->{dead}", '0 20', 'stats(): nothing pending, 20 dead');
is($node->safe_psql('postgres', q{
    SELECT delivered || ' ' || expired || ' ' || balance FROM outbox.conservation()
     WHERE destination = 'short'}),
    '1 20 0', 'conservation: 1 delivered, 20 expired, balance 0');
is($node->safe_psql('postgres', q{SELECT initial + produced FROM outbox.conservation() WHERE destination = 'short'}),
    '21', 'all 21 counted in');

sub decode_json_body {
    my ($r) = @_;
    my $body = MIME::Base64::decode_base64($r->{body_b64});
    return JSON::PP::decode_json($body)->{n};
}

check_server_log($node);
done_testing();
