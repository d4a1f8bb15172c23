# The sqs kind's AWS Signature Version 4 (libcurl's CURLOPT_AWS_SIGV4) against a server that
# verifies it: moto in server mode (test/tools/moto_node) with its authentication on recomputes
# every request's signature with the secret of the access key the request names, and checks the
# caller's IAM policy for the action on the queue (ElasticMQ, the other sqs files' server,
# accepts any signature). Checked with boto3 signing with the same credentials:
#   1. an IAM user's access key delivers; the requests' credential scope is <date>/<region>/sqs
#      and they sign content-type, host, x-amz-date and x-amz-target, nothing they do not send;
#   2. a wrong secret (SignatureDoesNotMatch) and a key moto never issued (InvalidClientTokenId)
#      are retried with the server's reason in last_error, nothing dead-lettered; after
#      outbox.alter_destination with the right credentials every message arrives;
#   3. temporary credentials of a role assumed through moto's STS (access key, secret, session
#      token) deliver, the token sent and signed; moto checks that the token is the one it issued
#      with the key (a wrong one: InvalidClientTokenId, retried until fixed). moto does not check a
#      token's expiry, nor that the token is among the signed headers: the test checks that itself
#      (moto_server.py records each request's SignedHeaders);
#   4. a FIFO queue: signed requests deliver each key's messages in id order.
# moto checks neither the request's age (AWS refuses a signature older than 15 minutes) nor that
# the region is one AWS has; the region does choose the queue (moto keeps queues per region).
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $moto = moto_node(region => 'eu-west-1');
my @queues = qw(signed refused temporary events.fifo);
$moto->{queue_urls}{$_} = $moto->sqs_queue($_) for @queues;
# Created while moto's authentication is off: then it takes any signature.
my $user = $moto->sqs_principal('outbox-sender', \@queues);
my $role = $moto->sqs_principal('outbox-temporary', ['temporary'], role => 1);
like($user->{access_key_id}, qr/^AKIA/, 'an IAM user access key');
like($role->{access_key_id}, qr/^ASIA/, 'temporary credentials from STS AssumeRole');
$moto->moto_auth(1);

# Authentication is on: boto3 with a wrong secret, or with a key moto never issued, is refused.
$moto->sqs_sign_as({ access_key_id => $user->{access_key_id}, secret_access_key => 'not-the-secret' });
ok(!eval { $moto->count('signed'); 1 }, 'moto refuses boto3 signing with a wrong secret');
$moto->sqs_sign_as({ access_key_id => 'AKIAIOSFODNN7EXAMPLE', secret_access_key => 'x' });
ok(!eval { $moto->count('signed'); 1 }, 'and boto3 with a key it never issued');
is(join(',', map { $_->{status} } @{ $moto->moto_requests }[-2, -1]), '403,403',
    'both answered 403');
$moto->sqs_sign_as($user);
is($moto->count('signed'), 0, 'boto3 with the IAM user\'s key is let through');

my $node = outbox_node('sqs_sigv4');
my %retry = (max_attempts => 1000, retry_base => '100ms', retry_max => '500ms');
my $signed = $moto->sqs_config('signed', %$user);
my $wrong_secret = $moto->sqs_config('refused', %$user, secret_access_key => 'not-the-secret', %retry);
my $unknown_key = $moto->sqs_config('refused', %$user, access_key_id => 'AKIAIOSFODNN7EXAMPLE', %retry);
my $wrong_token = $moto->sqs_config('temporary', %$role, session_token => "x$role->{session_token}", %retry);
my $fifo = $moto->sqs_config('events.fifo', %$user, ordering => 'key');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('signed', 'sqs', '$signed');
    SELECT outbox.create_destination('wrong_secret', 'sqs', '$wrong_secret');
    SELECT outbox.create_destination('unknown_key', 'sqs', '$unknown_key');
    SELECT outbox.create_destination('temporary', 'sqs', '$wrong_token');
    SELECT outbox.create_destination('fifo', 'sqs', '$fifo');
});

# 1. The IAM user's key.
my $n = 200;
my %sent = map { $_ => 1 } @{ produce($node, 'signed', 1, $n, key => 'k') };
ok(wait_until(sub { stats_row($node, 'signed')->{delivered_total} == $n }, 60),
    "$n messages delivered with the IAM user's key")
  or diag(explain(stats_row($node, 'signed')));
my %got = map { $_ => 1 } @{ $moto->event_ids('signed') };
is(scalar(grep { $sent{$_} } keys %got), $n, 'boto3 with that key reads every one back');
is(scalar(keys %got), $n, 'and nothing else');
my @batches = grep { ($_->{target} // '') eq 'AmazonSQS.SendMessageBatch' } @{ $moto->moto_requests };
cmp_ok(scalar(@batches), '>=', $n / 10, 'moto verified the SendMessageBatch requests');
is(scalar(grep { $_->{scope} !~ m{^\d{8}/eu-west-1/sqs/aws4_request$} } @batches), 0,
    'each signed for <date>/eu-west-1/sqs/aws4_request');
# What libcurl signs is every header it sends but its own: a header signed but not sent (an
# "Expect:" line did that) makes a verifying server refuse the request.
is(scalar(grep { join(';', @{ $_->{signed} }) ne 'content-type;host;x-amz-date;x-amz-target' } @batches),
    0, 'each signing exactly content-type, host, x-amz-date and x-amz-target')
  or diag(explain($batches[0]));

# 2. A wrong secret, a key moto never issued: retried with moto's reason, then delivered once
# alter_destination gives the right credentials.
my %refused_ids = map { $_ => 1 } @{ produce($node, 'wrong_secret', 1, 10, key => 'secret') },
  @{ produce($node, 'unknown_key', 1, 10, key => 'key') };
my $refused = sub {
    my ($dest) = @_;
    return $node->safe_psql('postgres', qq{
        SELECT count(*) FILTER (WHERE attempts >= 2) || '|' || string_agg(DISTINCT last_error, '; ')
          FROM outbox.messages WHERE destination = '$dest'});
};
my %why = (
    wrong_secret => 'SQS answered HTTP 403: SignatureDoesNotMatch: The request signature we '
      . 'calculated does not match the signature you provided. Check your AWS Secret Access Key '
      . 'and signing method. Consult the service documentation for details.',
    unknown_key => 'SQS answered HTTP 403: InvalidClientTokenId: The security token included in '
      . 'the request is invalid.');
for my $dest (qw(wrong_secret unknown_key)) {
    ok(wait_until(sub { $refused->($dest) =~ /^10\|/ }, 60), "$dest: every message tried twice or more")
      or diag($refused->($dest));
    is($refused->($dest) =~ s/^\d+\|//r, $why{$dest}, "$dest: last_error is moto's answer");
    my $s = stats_row($node, $dest);
    ok($s->{failed_total} >= 20 && $s->{dead} == 0 && $s->{delivered_total} == 0,
        "$dest: a rejection (attempts spent, backoff), not a dead letter")
      or diag(explain($s));
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');
for my $dest (qw(wrong_secret unknown_key)) {
    my $fixed = $moto->sqs_config('refused', %$user, %retry);
    $node->safe_psql('postgres', qq{SELECT outbox.alter_destination('$dest', '$fixed')});
}
ok(wait_until(sub { queued($node, 'wrong_secret') == 0 && queued($node, 'unknown_key') == 0 }, 60),
    'with the right credentials (alter_destination) both are delivered');
my %refused_got = map { $_ => 1 } @{ $moto->event_ids('refused') };
is(scalar(grep { $refused_ids{$_} } keys %refused_got), 20, 'boto3 reads all 20 from the queue');

# 3. Temporary credentials: a wrong session token first, then the one STS issued.
my %temporary_ids = map { $_ => 1 } @{ produce($node, 'temporary', 1, 10, key => 'temp') };
ok(wait_until(sub { $refused->('temporary') =~ /^10\|/ }, 60), 'wrong session token: every message tried twice or more')
  or diag($refused->('temporary'));
is($refused->('temporary') =~ s/^\d+\|//r,
    'SQS answered HTTP 403: InvalidClientTokenId: The security token included in the request is invalid.',
    "wrong session token: last_error is moto's answer");
is(stats_row($node, 'temporary')->{dead}, 0, 'wrong session token: retried, not dead');
my $temporary = $moto->sqs_config('temporary', %$role, %retry);
$node->safe_psql('postgres', qq{SELECT outbox.alter_destination('temporary', '$temporary')});
ok(wait_until(sub { queued($node, 'temporary') == 0 }, 60),
    'with the session token STS issued: delivered');
$moto->sqs_sign_as($role);
# At least once: a read or a send may repeat a message under load; the ten must all be there.
my @temporary_got = @{ $moto->event_ids('temporary') };
my %temporary_got = map { $_ => 1 } @temporary_got;
is(scalar(grep { $temporary_ids{$_} } keys %temporary_got), 10,
    'boto3 with the temporary credentials reads all 10');
is(scalar(keys %temporary_got), 10, 'and nothing else');
diag('temporary: ' . scalar(@temporary_got) . ' read, ' . (@temporary_got - keys %temporary_got) . ' duplicates');
my @temp = grep { ($_->{target} // '') eq 'AmazonSQS.SendMessageBatch' && $_->{status} == 200
        && $_->{token} } @{ $moto->moto_requests };
ok(@temp >= 1, 'moto took SendMessageBatch requests with a session token');
is(scalar(grep { join(';', @{ $_->{signed} }) ne
            'content-type;host;x-amz-date;x-amz-security-token;x-amz-target' } @temp), 0,
    'each signing x-amz-security-token too')
  or diag(explain($temp[0]));

# 4. A FIFO queue, ordering by key: each group arrives in id order. moto's SequenceNumber is
# random, so the queue is read in its order by one reader, each batch deleted before the next.
$moto->sqs_sign_as($user);
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'fifo', 'g' || (g % 3), jsonb_build_object('n', g) FROM generate_series(1, 60) g});
ok(wait_until(sub { stats_row($node, 'fifo')->{delivered_total} == 60 }, 60),
    'FIFO: 60 messages delivered');
my $fifo_got = $moto->received('events.fifo', threads => 1);
is(scalar(@$fifo_got), 60, 'FIFO: boto3 reads 60');
is(scalar(grep { ($_->{dedup} // '') eq ($_->{headers}{'ce-id'} // '-') } @$fifo_got), 60,
    'FIFO: MessageDeduplicationId is the event id');
my %by_group;
push @{ $by_group{ $_->{group} // '' } }, ($_->{body} =~ /"n": (\d+)/)[0] for @$fifo_got;
is(join(',', sort keys %by_group), 'g0,g1,g2', 'FIFO: MessageGroupId is the key');
is(scalar(grep { my $l = $by_group{$_}; join(',', @$l) ne join(',', sort { $a <=> $b } @$l) } keys %by_group),
    0, 'FIFO: each group arrives in id order');

$node->stop;
check_server_log($node);
$moto->stop;
done_testing();
