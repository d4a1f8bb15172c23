# Standard Webhooks, the rest of it, against the real local HTTP sink: v1a (ed25519) signatures
# beside v1, verified by an independent implementation (Python's cryptography package and hmac
# module); the webhook-timestamp is the attempt's and every retry is signed again; a 410 Gone
# pauses the destination instead of dead-lettering message after message, and resume delivers.
use strict;
use warnings;
use File::Temp qw(tempfile);
use JSON::PP;
use OutboxTest;
use Test::More;
use Time::HiRes qw(sleep);

my $hmac_secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
# RFC 8032 §7.1 TEST 1's key pair, as Standard Webhooks serializes it.
my $signing_key = 'whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=';
my $public_key = 'whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=';
my $sink = webhook_sink();
my $node = outbox_node('webhook_signing', conf => join("\n",
    "outbox.retry_base = '50ms'", "outbox.retry_max = '500ms'", "outbox.lease_timeout = '10s'"));

# Every request checked by Python: one line per request, "ok" or what failed.
sub verify_independently {
    my ($requests) = @_;
    my ($fh, $file) = tempfile(UNLINK => 1);
    print $fh JSON::PP->new->encode([ map { { headers => $_->{headers}, body_b64 => $_->{body_b64} } } @$requests ]);
    close $fh;
    my $script = <<'PY';
import base64, hmac, hashlib, json, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.exceptions import InvalidSignature
hmac_key = base64.b64decode(sys.argv[2][len("whsec_"):])
public = Ed25519PublicKey.from_public_bytes(base64.b64decode(sys.argv[3][len("whpk_"):]))
for r in json.load(open(sys.argv[1])):
    h = r["headers"]
    signed = (h["webhook-id"] + "." + h["webhook-timestamp"] + ".").encode() + base64.b64decode(r["body_b64"])
    sigs = h.get("webhook-signature", "").split(" ")
    v1 = [s[3:] for s in sigs if s.startswith("v1,")]
    v1a = [s[4:] for s in sigs if s.startswith("v1a,")]
    problems = []
    expected = base64.b64encode(hmac.new(hmac_key, signed, hashlib.sha256).digest()).decode()
    if v1 != [expected]:
        problems.append("v1")
    try:
        if len(v1a) != 1:
            raise InvalidSignature()
        public.verify(base64.b64decode(v1a[0]), signed)
    except InvalidSignature:
        problems.append("v1a")
    print(" ".join(problems) or "ok")
PY
    open(my $py, '-|', 'python3', '-c', $script, $file, $hmac_secret, $public_key) or die "python3: $!";
    my @lines = <$py>;
    close $py;
    chomp @lines;
    return \@lines;
}

# 1. Definition-time checks: a public key where a signing key belongs, and a malformed one, are
# refused with SQLSTATE 22023 and a hint; neither error quotes the key.
my ($rc, $out, $err) = $node->psql('postgres', qq{SELECT outbox.create_destination('pub', 'webhook',
    '{"url": "http://127.0.0.1:1/", "secret": "$public_key"}')}, extra_params => ['-v', 'VERBOSITY=verbose']);
like($err, qr/ERROR:  22023: invalid configuration for webhook destination "pub"/, 'a whpk_ public key as the secret: 22023');
like($err, qr/DETAIL:  "secret" is a public key \("whpk_"\): sign with its private key \("whsk_"\)/, 'the detail says which key belongs there');
like($err, qr/HINT:  Fix the setting above/, 'with a hint');
unlike($err, qr/11qYAYKxCrfVS/, 'the key is not echoed');
($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.create_destination('short', 'webhook',
    '{"url": "http://127.0.0.1:1/", "secret": ["whsec_Zm9vYmFy", "whsk_c2hvcnRrZXlzaG9ydGtleQ=="]}')});
like($err, qr/element 2 of "secret" must be "whsk_" followed by the base64 of a 32-byte ed25519 private key/,
    'a whsk_ key of the wrong length is refused');
unlike($err, qr/c2hvcnRrZXlzaG9ydGtleQ/, 'and not echoed');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.destinations WHERE name IN ('pub', 'short')}), '0',
    'neither destination exists');

# 2. v1 and v1a together, every retry signed again with the attempt's timestamp: the first
# attempt of each message fails with "Retry-After: 2", which puts the second attempt in a later
# second (the backoff alone has full jitter and may not).
my $path = '/signed;fail_first=1;fail_status=503;retry_after=2';
$sink->create_destination($node, 'signed', $path, secret => [$hmac_secret, $signing_key], retry_max => '5s');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, topic, payload)
    SELECT 'signed', 'order.created', jsonb_build_object('n', g, 's', repeat('é', g)) FROM generate_series(1, 20) g});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'signed'}) eq '0' }, 60),
    'all 20 delivered');
my $reqs = $sink->requests_for($path);
is(scalar(@$reqs), 40, 'two attempts each (a 503, then a 204)');
my $results = verify_independently($reqs);
is(scalar(grep { $_ eq 'ok' } @$results), 40, 'every request carries one v1 and one v1a signature, both verified by Python')
  or diag(join("\n", @$results[0 .. 4]));
like($reqs->[0]{headers}{'webhook-signature'}, qr{^v1,[A-Za-z0-9+/]{43}= v1a,[A-Za-z0-9+/]{86}==$}, 'v1 first, then v1a');
my %by_id;
push @{ $by_id{ $_->{headers}{'webhook-id'} } }, $_ for @$reqs;
my @same = grep {
    my ($a, $b) = @{ $by_id{$_} };
    $a->{headers}{'webhook-timestamp'} >= $b->{headers}{'webhook-timestamp'}
      || $a->{headers}{'webhook-signature'} eq $b->{headers}{'webhook-signature'}
} keys %by_id;
is(scalar(@same), 0, 'each retry has a later webhook-timestamp than its first attempt and a new signature')
  or diag(join("\n", map { join(' / ', map { "$_->{headers}{'webhook-timestamp'} $_->{status}" } @{ $by_id{$_} }) } @same[0 .. 2]));

# 3. 410 Gone pauses the destination: stats() says paused and why, the messages stay queued
# (no attempt spent, nothing dead-lettered); resume after pointing it elsewhere delivers them.
$sink->create_destination($node, 'gone', '/gone;status=410;body=endpoint%20removed', secret => $hmac_secret);
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload)
    SELECT 'gone', jsonb_build_object('n', g) FROM generate_series(1, 10) g});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT paused FROM outbox.destinations WHERE name = 'gone'}) eq 't' }, 30),
    'a 410 pauses the destination');
my $stats = stats_row($node, 'gone');
ok($stats->{paused}, 'stats() shows it paused');
like($stats->{last_error}, qr/^HTTP 410: endpoint removed; destination paused \(the endpoint asked to receive no more webhooks\): outbox.resume\('gone'\)/,
    'last_error names the 410 and the way out');
# The messages in flight when the first 410 came back are answered too.
ok(wait_until(sub { stats_row($node, 'gone')->{in_flight} == 0 }, 30), 'nothing of gone is in flight');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'gone' AND attempts = 0 AND lease_token IS NULL}),
    '10', 'all 10 messages still queued, no attempt spent');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'gone'}), '0', 'none dead-lettered');
my $sent = scalar(@{ $sink->requests_for('/gone;status=410;body=endpoint%20removed') });
ok(wait_for_cycles($node, 5), 'the worker has turned five times since');
is(scalar(@{ $sink->requests_for('/gone;status=410;body=endpoint%20removed') }), $sent, 'nothing more is sent while paused');
ok($sent <= 10, "at most the batch in flight was sent ($sent)");
my $good = $sink->url('/gone_new');
$node->safe_psql('postgres', qq{SELECT outbox.alter_destination('gone', '{"url": "$good"}'); SELECT outbox.resume('gone')});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'gone'}) eq '0' }, 30),
    'resume delivers them');
my %ids = map { $_->{headers}{'webhook-id'} => 1 } @{ $sink->requests_for('/gone_new') };
is(scalar(keys %ids), 10, 'all 10, to the new URL');
ok(!stats_row($node, 'gone')->{paused}, 'no longer paused');

done_testing();
