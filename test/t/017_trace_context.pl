# Trace context captured at INSERT and carried across the outbox: a producer that sets
# outbox.traceparent with SET LOCAL, and one that sends a SQLCommenter comment, each yield Kafka
# records (read by kcat) and webhook requests (the sink's record) whose traceparent, tracestate
# and ce_traceparent carry that trace. A producer's own header wins; a malformed value, from
# any of them (the producer's own header and outbox.publish's too), is ignored with a WARNING
# and the transaction commits.
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $broker = kafka_broker();
my $sink = webhook_sink();
my $node = outbox_node('trace');
my $bootstrap = $broker->bootstrap;
my $url = $sink->url('/trace');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "traced"}');
    SELECT outbox.create_destination('h', 'webhook', '{"url": "$url"}');
});

my $tp_set = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
my $tp_comment = '00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01';
my $tp_own = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00';

# 1. SET LOCAL, as an application's middleware does once per transaction.
$node->safe_psql('postgres', qq{
    BEGIN;
    SET LOCAL outbox.traceparent = '$tp_set';
    SET LOCAL outbox.tracestate = 'rojo=00f067aa0ba902b7';
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'set', '{}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('h', 'set', '{"via": "set"}');
    COMMIT;
    -- SET LOCAL ends with its transaction.
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'after', '{}');
});
# 2. SQLCommenter, as sqlcommenter middleware (or pg_tracing's users) append it.
$node->safe_psql('postgres',
    "INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'comment', '{}'), "
  . "('h', 'comment', '{\"via\": \"comment\"}') "
  . "/*application='shop',traceparent='$tp_comment',tracestate='congo%3Dt61rcWkgMzE'*/");
# 3. The producer's own header wins over both.
$node->safe_psql('postgres', qq{
    BEGIN;
    SET LOCAL outbox.traceparent = '$tp_set';
    INSERT INTO outbox.messages (destination, key, payload, headers)
    VALUES ('k', 'own', '{}', '{"traceparent": "$tp_own"}') /*traceparent='$tp_comment'*/;
    COMMIT;
});
# 4. Malformed values: a WARNING, and the messages are queued without them.
my ($rc, $out, $err) = $node->psql('postgres', q{
    BEGIN;
    SET LOCAL outbox.traceparent = '00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01';
    INSERT INTO outbox.messages (destination, key, payload) SELECT 'k', 'bad-set', '{}' FROM generate_series(1, 3);
    COMMIT;});
is($rc, 0, 'a malformed outbox.traceparent does not fail the transaction');
like($err, qr/WARNING:  outbox ignores the malformed traceparent "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01" from outbox\.traceparent/,
    'it is ignored with a WARNING naming the value and where it came from');
is(scalar(() = $err =~ /WARNING/g), 1, 'one WARNING for the statement, not one per row');
($rc, $out, $err) = $node->psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('h', 'bad-comment', '{"via": "bad"}')
    /*traceparent='00-00000000000000000000000000000000-c532cb4098ac3dd2-01'*/});
is($rc, 0, 'a malformed SQLCommenter traceparent does not fail the INSERT');
like($err, qr/WARNING:  outbox ignores the malformed traceparent .* from the statement's SQLCommenter comment/,
    'and is ignored with a WARNING');

# 5. The producer's own header follows the same rule: a malformed one is left out with a WARNING
# (with its tracestate), and the session's context applies instead; nothing malformed is sent.
($rc, $out, $err) = $node->psql('postgres', qq{
    INSERT INTO outbox.messages (destination, key, payload, headers)
    VALUES ('k', 'bad-header', '{}', '{"traceparent": "00-abc-def-01", "tracestate": "rojo=1", "x-a": "1"}'),
           ('h', 'bad-header', '{"via": "bad-header"}', '{"traceparent": "00-abc-def-01"}');
    BEGIN;
    SET LOCAL outbox.traceparent = '$tp_set';
    INSERT INTO outbox.messages (destination, key, payload, headers)
    VALUES ('k', 'bad-header-session', '{}', '{"traceparent": "00-ABC"}');
    COMMIT;
    SELECT outbox.publish(ARRAY['k'], 'traced', '{}', 'bad-publish', '{"traceparent": "01-xyz"}');});
is($rc, 0, 'a malformed traceparent header does not fail the INSERT or outbox.publish');
is(scalar(() = $err =~ /WARNING:  outbox ignores the malformed traceparent "[^"]*" from the message's "traceparent" header/g), 3,
    'one WARNING for each of the three statements');

ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'all delivered');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'none dead-lettered');

my %k;
for my $m (@{ $broker->consume('traced') }) { push @{ $k{ $m->{key} } }, $m->{headers} }
is($k{set}[0]{traceparent}, $tp_set, 'Kafka, SET LOCAL: traceparent header');
is($k{set}[0]{ce_traceparent}, $tp_set, 'Kafka, SET LOCAL: ce_traceparent (CloudEvents distributed tracing)');
is($k{set}[0]{tracestate}, 'rojo=00f067aa0ba902b7', 'Kafka, SET LOCAL: tracestate');
is($k{set}[0]{ce_tracestate}, 'rojo=00f067aa0ba902b7', 'Kafka, SET LOCAL: ce_tracestate');
ok(!exists $k{after}[0]{traceparent} && !exists $k{after}[0]{ce_traceparent},
    'after the transaction, no trace context');
is($k{comment}[0]{traceparent}, $tp_comment, 'Kafka, SQLCommenter: traceparent header');
is($k{comment}[0]{ce_traceparent}, $tp_comment, 'Kafka, SQLCommenter: ce_traceparent');
is($k{comment}[0]{tracestate}, 'congo=t61rcWkgMzE', 'Kafka, SQLCommenter: tracestate URL-decoded');
is($k{own}[0]{traceparent}, $tp_own, 'the producer\'s own traceparent header is kept');
is($k{own}[0]{ce_traceparent}, $tp_own, 'and is the ce_traceparent');
is(scalar(@{ $k{'bad-set'} // [] }), 3, 'the three messages with a malformed setting were delivered');
is(scalar(grep { exists $_->{traceparent} || exists $_->{ce_traceparent} } @{ $k{'bad-set'} }), 0,
    'without a trace context');

ok($k{'bad-header'} && !exists $k{'bad-header'}[0]{traceparent} && !exists $k{'bad-header'}[0]{ce_traceparent}
    && !exists $k{'bad-header'}[0]{tracestate} && $k{'bad-header'}[0]{'x-a'} eq '1',
    'Kafka, malformed header: sent without traceparent, ce_traceparent and tracestate, its other header kept');
is($k{'bad-header-session'}[0]{traceparent}, $tp_set, 'Kafka, malformed header: the session\'s context instead');
ok($k{'bad-publish'} && !exists $k{'bad-publish'}[0]{traceparent}, 'Kafka, outbox.publish: sent without it');
my %h = map { (JSON::PP::decode_json($_->{body})->{via} => $_->{headers}) } @{ $sink->requests };
is($h{set}{traceparent}, $tp_set, 'HTTP, SET LOCAL: traceparent header');
is($h{set}{tracestate}, 'rojo=00f067aa0ba902b7', 'HTTP, SET LOCAL: tracestate header');
is($h{comment}{traceparent}, $tp_comment, 'HTTP, SQLCommenter: traceparent header');
ok($h{bad} && !exists $h{bad}{traceparent}, 'HTTP, malformed comment: delivered without traceparent');
ok($h{'bad-header'} && !exists $h{'bad-header'}{traceparent}, 'HTTP, malformed header: delivered without traceparent');

# What is stored is visible to the producer too (the row's headers).
$node->safe_psql('postgres', 'SELECT outbox.pause(\'k\')');
$node->safe_psql('postgres', "BEGIN; SET LOCAL outbox.traceparent = '$tp_set'; "
  . "INSERT INTO outbox.messages (destination, key, payload, headers) VALUES ('k', 'stored', '{}', '{\"x-a\": \"1\"}'); COMMIT;");
is($node->safe_psql('postgres', "SELECT headers FROM outbox.messages WHERE key = 'stored'"),
    qq({"x-a": "1", "traceparent": "$tp_set"}), 'stored with the row, beside the producer\'s headers');

check_server_log($node);
$node->stop;
$broker->stop;
$sink->stop;
done_testing();
