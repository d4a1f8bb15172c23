# CloudEvents on the wire, read by independent clients (kcat for Kafka, the sink's record for
# webhooks) as a consumer's CloudEvents library would read them: binary mode with content-type,
# the producer's ce_type, Kafka tombstones (null values) and structured mode
# (application/cloudevents+json), signed as sent.
use strict;
use warnings;
use Digest::SHA qw(hmac_sha256_base64);
use JSON::PP;
use MIME::Base64 qw(decode_base64 encode_base64);
use OutboxTest;
use Test::More;

my $broker = kafka_broker();
my $sink = webhook_sink();
my $node = outbox_node('cloudevents');
my $bootstrap = $broker->bootstrap;
my $secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
my $hmac_key = decode_base64(substr($secret, 6));
my ($binary_url, $structured_url) = ($sink->url('/binary'), $sink->url('/structured'));

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('bin', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "customers"}');
    SELECT outbox.create_destination('st', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "customers-structured",
          "cloudevents": "structured"}');
    SELECT outbox.create_destination('hook', 'webhook', '{"url": "$binary_url"}');
    SELECT outbox.create_destination('shook', 'webhook',
        '{"url": "$structured_url", "secret": "$secret", "cloudevents": "structured"}');
});

# Binary mode: JSON, bytes, a producer content-type, a producer type, a tombstone.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (event_id, destination, key, payload)
    VALUES ('018f0000-0000-7000-8000-000000000001', 'bin', 'json', '{"n": 1}');
    INSERT INTO outbox.messages (destination, key, payload_bytes)
    VALUES ('bin', 'bytes', '\x000000002a02');
    INSERT INTO outbox.messages (destination, key, payload_bytes, headers)
    VALUES ('bin', 'avro', '\x0000000007', '{"content-type": "application/avro"}');
    INSERT INTO outbox.messages (destination, key, payload, headers)
    VALUES ('bin', 'typed', '{"n": 2}', '{"ce_type": "com.example.customer.created", "x-app": "crm"}');
    INSERT INTO outbox.messages (event_id, destination, key)
    VALUES ('018f0000-0000-7000-8000-000000000002', 'bin', 'json');
    -- Structured mode: JSON, bytes with their own content type, a tombstone.
    INSERT INTO outbox.messages (event_id, destination, key, payload, headers)
    VALUES ('018f0000-0000-7000-8000-000000000003', 'st', 's-json', '{"n": 3}', '{"ce-type": "com.example.customer.updated", "x-app": "crm"}');
    INSERT INTO outbox.messages (destination, key, payload_bytes, headers)
    VALUES ('st', 's-bytes', '\x00ff', '{"content-type": "application/x-protobuf"}');
    INSERT INTO outbox.messages (destination, key) VALUES ('st', 's-json');
    -- Webhooks.
    INSERT INTO outbox.messages (destination, topic, payload, headers)
    VALUES ('hook', 'customer', '{"n": 4}', '{"ce_type": "com.example.customer.deleted"}');
    INSERT INTO outbox.messages (destination, topic, payload) VALUES ('hook', 'customer', '{"n": 5}');
    INSERT INTO outbox.messages (destination, topic, payload, headers)
    VALUES ('shook', 'customer', '{"n": 6}', '{"ce_type": "com.example.customer.merged", "x-app": "crm"}');
    INSERT INTO outbox.messages (destination, topic, payload_bytes) VALUES ('shook', 'customer', '\x0102');
});
my %ids = (json => '018f0000-0000-7000-8000-000000000001',
    'json-tombstone' => '018f0000-0000-7000-8000-000000000002',
    's-json' => '018f0000-0000-7000-8000-000000000003');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'all 12 messages delivered');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'none dead-lettered');

# Kafka, binary mode. kcat -J gives a null value as JSON null.
my @bin = @{ $broker->consume('customers') };
is(scalar(@bin), 5, 'kcat reads 5 records from customers');
my %by_key;
for my $m (@bin) { push @{ $by_key{ $m->{key} } }, $m }
my ($json) = grep { defined $_->{payload} } @{ $by_key{json} };
is($json->{payload}, '{"n": 1}', 'JSON payload is the value');
is($json->{headers}{'content-type'}, 'application/json', 'payload: content-type application/json');
is($json->{headers}{ce_id}, $ids{json}, 'ce_id is the event id');
is($json->{headers}{ce_type}, 'customers', 'ce_type defaults to the topic');
is($json->{headers}{ce_specversion}, '1.0', 'ce_specversion 1.0');
is($by_key{bytes}[0]{headers}{'content-type'}, 'application/octet-stream',
    'payload_bytes: content-type application/octet-stream');
is($by_key{bytes}[0]{payload}, "\0\0\0\0\x2a\x02", 'bytes delivered byte for byte');
is($by_key{avro}[0]{headers}{'content-type'}, 'application/avro',
    'the producer\'s content-type header is the content-type');
my $typed = $by_key{typed}[0];
is($typed->{headers}{ce_type}, 'com.example.customer.created', 'a producer ce_type header is ce_type');
is($typed->{headers}{'x-app'}, 'crm', 'the other producer headers travel as they are');
is(scalar(grep { $_ eq 'ce_type' } @{ decode_json(kcat_raw_headers('customers', 'typed')) }), 1,
    'ce_type is sent once');
my ($tomb) = grep { !defined $_->{payload} } @{ $by_key{json} };
ok($tomb && @{ $by_key{json} } == 2, 'a keyed message without payload is a tombstone: null value');
is($tomb->{headers}{ce_id}, $ids{'json-tombstone'}, 'the tombstone carries its ce_id');
ok(!exists $tomb->{headers}{'content-type'}, 'and no content-type (there is no data)');

# Kafka, structured mode.
my @st = @{ $broker->consume('customers-structured') };
is(scalar(@st), 3, 'kcat reads 3 records from customers-structured');
%by_key = ();
for my $m (@st) { push @{ $by_key{ $m->{key} } }, $m }
my ($sj) = grep { defined $_->{payload} } @{ $by_key{'s-json'} };
is($sj->{headers}{'content-type'}, 'application/cloudevents+json', 'structured: content-type application/cloudevents+json');
ok(!exists $sj->{headers}{ce_id} && !exists $sj->{headers}{ce_type}, 'structured: no ce_ headers');
is($sj->{headers}{'x-app'}, 'crm', 'structured: the producer headers travel as headers');
my $event = decode_json($sj->{payload});
like($event->{time}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'the event has an RFC 3339 time');
delete $event->{time};
is_deeply($event, { specversion => '1.0', id => $ids{'s-json'}, source => '/outbox/postgres',
        type => 'com.example.customer.updated', datacontenttype => 'application/json',
        data => { n => 3 } }, 'the value is the whole event, with the JSON payload as data');
my $sb = decode_json($by_key{'s-bytes'}[0]{payload});
is($sb->{data_base64}, 'AP8=', 'payload_bytes goes as data_base64');
is($sb->{datacontenttype}, 'application/x-protobuf', 'with the producer\'s content-type as datacontenttype');
my ($stomb) = grep { !defined $_->{payload} } @{ $by_key{'s-json'} };
ok($stomb && @{ $by_key{'s-json'} } == 2, 'a tombstone on a structured destination is still a null value');
is($stomb->{headers}{ce_type}, 'customers-structured', 'sent with the binary ce_ headers');

# Webhooks.
my @reqs = @{ $sink->requests };
my @binary = grep { $_->{path} eq '/binary' } @reqs;
my @structured = grep { $_->{path} eq '/structured' } @reqs;
is(scalar(@binary), 2, 'two binary webhook requests');
my ($typed_req) = grep { $_->{body} eq '{"n": 4}' } @binary;
my ($plain_req) = grep { $_->{body} eq '{"n": 5}' } @binary;
is($typed_req->{headers}{'ce-type'}, 'com.example.customer.deleted', 'webhook: a producer ce_type header is ce-type');
ok(!exists $typed_req->{headers}{ce_type}, 'and is not sent under its own name');
is($plain_req->{headers}{'ce-type'}, 'customer', 'webhook: ce-type defaults to the topic');
is(scalar(@structured), 2, 'two structured webhook requests');
my @bad_sig;
for my $r (@structured) {
    my $h = $r->{headers};
    my $mac = hmac_sha256_base64("$h->{'webhook-id'}.$h->{'webhook-timestamp'}." . decode_base64($r->{body_b64}), $hmac_key);
    $mac .= '=' while length($mac) % 4;
    push @bad_sig, $h->{'webhook-id'} unless ($h->{'webhook-signature'} // '') eq "v1,$mac";
}
is(scalar(@bad_sig), 0, 'structured webhook bodies are what is signed (independent HMAC-SHA256)');
my ($sjr) = grep { decode_json($_->{body})->{data} } @structured;
my ($sbr) = grep { decode_json($_->{body})->{data_base64} } @structured;
is($sjr->{headers}{'content-type'}, 'application/cloudevents+json', 'structured webhook: content-type');
ok(!exists $sjr->{headers}{'ce-id'}, 'structured webhook: no ce- headers');
is($sjr->{headers}{'x-app'}, 'crm', 'structured webhook: producer headers still sent');
$event = decode_json($sjr->{body});
is($event->{id}, $sjr->{headers}{'webhook-id'}, 'the event id is the webhook-id');
delete $event->{time};
is_deeply($event, { specversion => '1.0', id => $sjr->{headers}{'webhook-id'},
        source => '/outbox/postgres', type => 'com.example.customer.merged',
        datacontenttype => 'application/json', data => { n => 6 } },
    'structured webhook body is the whole event');
is(decode_json($sbr->{body})->{data_base64}, 'AQI=', 'bytes as data_base64');
is(decode_json($sbr->{body})->{type}, 'customer', 'type defaults to the topic');

check_server_log($node);
$node->stop;
$broker->stop;
$sink->stop;
done_testing();

# The header names of the record with key $key, in order, as kcat prints them (a JSON list).
sub kcat_raw_headers {
    my ($topic, $key) = @_;
    my $out = `kcat -C -b $bootstrap -t $topic -o beginning -e -q -J 2>/dev/null`;
    for my $line (split /\n/, $out) {
        my $m = decode_json($line);
        next unless ($m->{key} // '') eq $key;
        my @h = @{ $m->{headers} // [] };
        return encode_json([ @h[ grep { $_ % 2 == 0 } 0 .. $#h ] ]);
    }
    return '[]';
}
