# Schema-registry framing passes through: a producer writes a Confluent-framed Avro record (magic
# byte 0, 4-byte big-endian schema id, Avro binary body) into payload_bytes with its own
# content-type header; the Kafka record (mock cluster, read by kcat) is byte for byte the same,
# carries that content-type, and decodes as a registry client would (fastavro after the 5-byte
# prefix). Numbered with the host-only tiers (2xx): fastavro is in the host's test venv.
use strict;
use warnings;
use IPC::Run;
use OutboxTest;
use Test::More;

my $python = ($ENV{OUTBOX_TEST_VENV} // '/var/cache/outbox-test/venv') . '/bin/python';
my $broker = kafka_broker();
my $node = outbox_node('schema_registry');
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{SELECT outbox.create_destination('avro', 'kafka',
    '{"bootstrap.servers": "$bootstrap", "topic": "orders.avro"}')});

my $schema = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"}, {"name": "total", "type": "double"}]}';
# The producer side: fastavro writes the Avro body, the frame is magic 0 + schema id 42.
my ($hex, $err) = ('', '');
IPC::Run::run([$python, '-c', <<'PY', $schema], '>', \$hex, '2>', \$err) or die "fastavro: $err";
import io, json, struct, sys
from fastavro import parse_schema, schemaless_writer
buf = io.BytesIO()
schemaless_writer(buf, parse_schema(json.loads(sys.argv[1])), {"id": 7, "customer": "Zoë", "total": 12.5})
sys.stdout.write((b"\x00" + struct.pack(">I", 42) + buf.getvalue()).hex())
PY
like($hex, qr/^000000002a[0-9a-f]+$/, 'a framed record: magic byte 0, schema id 42');
$node->safe_psql('postgres', qq{INSERT INTO outbox.messages (destination, key, payload_bytes, headers)
    VALUES ('avro', 'order-7', decode('$hex', 'hex'), '{"content-type": "application/vnd.apache.avro+binary"}')});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60), 'delivered');

# kcat: the raw value (one record), then its headers.
sub kcat {
    my ($format) = @_;
    my ($out, $e) = ('', '');
    IPC::Run::run(['kcat', '-C', '-b', $bootstrap, '-t', 'orders.avro', '-o', 'beginning', '-c', '1', '-e', '-q',
        '-f', $format], '>', \$out, '2>', \$e, IPC::Run::timeout(60)) or die "kcat: $e";
    return $out;
}
my $value = kcat('%s');
is(unpack('H*', $value), $hex, 'the Kafka record value is byte for byte what the producer wrote');
my $headers = kcat('%h');
like($headers, qr/(?:^|,)content-type=application\/vnd\.apache\.avro\+binary(?:,|$)/, "the producer's content-type");
unlike($headers, qr/content-type=application\/octet-stream/, 'not the payload_bytes default');
is(kcat('%k'), 'order-7', 'the key');

# The consumer side: a registry client reads the schema id, then the body with that schema.
my ($decoded, $err2) = ('', '');
IPC::Run::run([$python, '-c', <<'PY', $schema], '<', \$value, '>', \$decoded, '2>', \$err2) or die "fastavro: $err2";
import io, json, struct, sys
from fastavro import parse_schema, schemaless_reader
data = sys.stdin.buffer.read()
magic, schema_id = data[0], struct.unpack(">I", data[1:5])[0]
record = schemaless_reader(io.BytesIO(data[5:]), parse_schema(json.loads(sys.argv[1])))
print(json.dumps({"magic": magic, "schema_id": schema_id, "record": record}, sort_keys=True, ensure_ascii=False))
PY
chomp $decoded;
is($decoded, '{"magic": 0, "record": {"customer": "Zoë", "id": 7, "total": 12.5}, "schema_id": 42}',
    'fastavro decodes it after the 5-byte prefix: schema id 42 and the record');

$node->stop;
check_server_log($node);
done_testing();
