# Fuzzing the SQL surface with a fixed seed: a few thousand random producer INSERTs (known,
# unknown and malformed destinations; JSON payloads and headers full of quotes, backslashes,
# unicode, control characters, deep nesting, wrong types, NULLs; random available_at and
# expires_at; relay-owned columns) and random create/alter/drop_destination calls (both kinds,
# configs mixing valid and invalid keys and values), each its own statement in a few psql
# sessions. Errors are expected and counted. Then: the server never crashed; every refusal is an
# ordinary error (no internal error); every accepted destination passes the check again; every
# accepted message is deliverable and keeps the producer rules; and once the workers are
# switched on they deliver the lot to a real webhook sink and Kafka broker without crashing and
# without a header injected.
use strict;
use warnings;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

srand(42);

my $sink = webhook_sink();
my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
# No workers while the fuzz runs: the outcome of every statement, and what the tables hold
# afterwards, do not depend on timing. The workers are switched on for the second part.
my $node = outbox_node('fuzz', conf => join("\n", "outbox.databases = ''",
    "outbox.retry_base = '20ms'", "outbox.retry_max = '200ms'", "outbox.lease_timeout = '10s'"));
my $postmaster_pid = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];

#-------------------------------------------------------------------------------------------
# Random material
#-------------------------------------------------------------------------------------------
sub pick { return $_[ int(rand(@_)) ]; }
sub chance { return rand() < $_[0]; }

my @nasty = ('', ' ', 'plain', "quote'single", 'quote"double', 'back\\slash', '\\"', "\\'",
    "tab\there", "new\nline", "carriage\rreturn", "\r\nX-Injected: yes", "nul\x00byte",
    "bell\x07", "del\x7f", "esc\x1b[31m", "\x01\x02\x03", "caf\x{e9}", "\x{1F600} emoji",
    "rtl \x{202E}override", "line\x{2028}sep", "\x{FEFF}bom", "e\x{301}combining",
    "\x{10FFFF}max", '%s%n%x%d', '${jndi:ldap://x}', "'; DROP TABLE outbox.messages; --",
    '<script>alert(1)</script>', '../../etc/passwd', 'a' x 300, "\x{e9}" x 200, '{"json": 1}',
    '[1,2]', 'null', 'true', '-0', '1e400', ':var', ":'var'", '\\echo x', '$$', '$x$');

sub nasty_string {
    return pick(@nasty) if chance(0.6);
    my $len = int(rand(20));
    my $s = '';
    for (1 .. $len) {
        my $r = rand();
        $s .= $r < 0.6 ? chr(32 + int(rand(95)))
            : $r < 0.75 ? chr(1 + int(rand(31)))
            : $r < 0.9 ? chr(0xA0 + int(rand(0x2000)))
            : chr(0x1F300 + int(rand(0x300)));
    }
    return $s;
}

# JSON text of a string, ASCII only (every non-ASCII character as \u escapes).
my $json_ascii = JSON::PP->new->ascii->allow_nonref;
sub json_str { return $json_ascii->encode($_[0]); }

sub random_number {
    return pick('0', '-0', '1', '-1', '42', '3.14', '-2.5e-3', '1e308', '-1e308', '1e-400',
        '1e400', '123456789012345678901234567890', '9223372036854775807',
        '9223372036854775808', '-9223372036854775809', '0.1', '1E+2', '5.0');
}

# Random JSON text of depth at most $depth.
sub random_json {
    my ($depth) = @_;
    my $r = rand();
    if ($depth <= 0 || $r < 0.45) {
        my $s = rand();
        return $s < 0.45 ? json_str(nasty_string())
            : $s < 0.75 ? random_number()
            : $s < 0.85 ? 'true' : $s < 0.92 ? 'false' : 'null';
    }
    my $n = int(rand(5));
    if ($r < 0.75) {
        return '{' . join(',', map { json_str(nasty_string()) . ':' . random_json($depth - 1) } 1 .. $n) . '}';
    }
    return '[' . join(',', map { random_json($depth - 1) } 1 .. $n) . ']';
}

# An SQL literal for a text value: plain when it is printable ASCII, else decoded from JSON
# (so that the SQL text itself stays printable ASCII whatever the value holds).
sub sql_text {
    my ($s) = @_;
    return 'NULL' unless defined $s;
    return "'" . ($s =~ s/'/''/gr) . "'" if $s =~ /^[\x20-\x7e]*$/;
    return "('" . (json_str($s) =~ s/'/''/gr) . "'::jsonb #>> '{}')";
}
sub sql_jsonb { my ($j) = @_; return defined $j ? "'" . ($j =~ s/'/''/gr) . "'::jsonb" : 'NULL'; }

my @fixed = qw(k_good k_notopic h_good h_ordered k_ordered);
my @created;   # names the fuzz tries to create (valid ones are candidates for INSERTs)
for my $i (1 .. 60) { push @created, "fz_$i"; }

sub random_destination {
    my $r = rand();
    return pick(@fixed) if $r < 0.7;
    return pick(@created) if $r < 0.82;
    return pick(undef, '', ' ', 'K_GOOD', 'k_good ', 'nope', 'x' x 64, 'x' x 5000,
        "caf\x{e9}" x 20, "k_good\n", 'k_good;', "h_good'--", nasty_string());
}

sub random_header_name {
    my $r = rand();
    return pick('x-trace', 'traceparent', 'content-type', 'authorization', 'x-tenant', 'X-Mixed',
        'x_under', "x-'quote", '!#$%&*+-.^_`|~') if $r < 0.5;
    return pick('Host', 'content-length', 'Transfer-Encoding', 'webhook-signature', 'ce-id',
        'ce_type', 'Proxy-Foo', 'connection', 'te') if $r < 0.6;
    return pick('n' x 256, 'n' x 257, 'bad name', 'a:b', '', "x\r\ny", "caf\x{e9}", '(x)')
      if $r < 0.75;
    return 'x-' . nasty_string();
}

sub random_header_value {
    my $r = rand();
    return json_str(nasty_string()) if $r < 0.7;
    return json_str('v' x 8192) if $r < 0.73;
    return json_str('v' x 8193) if $r < 0.75;
    return json_str("\x{e9}" x 4097) if $r < 0.77;
    return random_json(2);
}

sub random_headers {
    my $r = rand();
    return undef if $r < 0.35;
    return pick('[]', '"x"', '1', 'null', 'true', '["a","b"]') if $r < 0.4;
    if ($r < 0.42) {
        my $n = pick(64, 65);
        return '{' . join(',', map { json_str("h$_") . ':"v"' } 1 .. $n) . '}';
    }
    if ($r < 0.7) {
        # well-formed: token names, values without control characters
        my $n = int(rand(4));
        return '{' . join(',', map {
            json_str(pick('x-trace', 'traceparent', 'x-tenant', 'content-type', 'X-Mixed', "x-h$_"))
              . ':' . json_str(pick('v', '', "caf\x{e9}", "\x{1F600}", 'a"b', 'a\\b', "x" x 100, '%s'))
        } 1 .. $n) . '}';
    }
    my $n = int(rand(6));
    return '{' . join(',', map { json_str(random_header_name()) . ':' . random_header_value() } 1 .. $n) . '}';
}

sub random_topic {
    my $r = rand();
    return undef if $r < 0.45;
    return pick('t1', 't2', 'orders.v2', 'a_b-c.d') if $r < 0.7;
    return pick('', '.', '..', 't' x 249, 't' x 250, 'bad topic', "t\r\nX-Injected: yes",
        "t\x01", "caf\x{e9}", 't/1') if $r < 0.85;
    return nasty_string();
}

sub random_key {
    my $r = rand();
    return undef if $r < 0.35;
    return 'k' . int(rand(20)) if $r < 0.7;
    return pick('', 'k' x 1024, 'k' x 1025, "\x{e9}" x 512, "\x{e9}" x 512 . 'k', 'k' x 5000)
      if $r < 0.8;
    return nasty_string();
}

sub random_time {
    my ($null_chance) = @_;
    return 'NULL' if chance($null_chance);
    return pick(q{'infinity'}, q{'-infinity'}, q{'3000-01-01'}, q{'1970-01-01'},
        q{now() + interval '367 days'}, q{now() + interval '365 days'}, q{now()},
        q{now() - interval '1 hour'}, q{now() + interval '2 seconds'},
        q{now() + interval '10 minutes'}, q{'4713-01-01 BC'});
}

sub random_payload_columns {
    my $r = rand();
    # (payload, payload_bytes)
    return (sql_jsonb(random_json(4)), 'NULL') if $r < 0.7;
    return (sql_jsonb(random_json(0)), 'NULL') if $r < 0.75;
    if ($r < 0.78) {
        my $d = 1 + int(rand(3000));
        return (sql_jsonb(('[' x $d) . (']' x $d)), 'NULL');
    }
    if ($r < 0.8) {
        my $d = 1 + int(rand(300));
        return (sql_jsonb(('{"a":' x $d) . '1' . ('}' x $d)), 'NULL');
    }
    if ($r < 0.81) {
        # numbers whose text is far longer than their jsonb form
        my $n = 1 + int(rand(12));
        return ("(SELECT jsonb_agg('1e131071'::numeric) FROM generate_series(1, $n))", 'NULL');
    }
    return ("to_jsonb(repeat('p', " . pick(1000, 100000, 1048574, 1048575) . '))', 'NULL')
      if $r < 0.83;
    if ($r < 0.93) {
        my $hex = join('', map { sprintf('%02x', int(rand(256))) } 1 .. int(rand(200)));
        return ('NULL', "'\\x$hex'::bytea");
    }
    return ('NULL', "decode(repeat('00', " . pick(1048576, 1048577) . "), 'hex')") if $r < 0.95;
    return (sql_jsonb('{}'), "'\\x00'::bytea") if $r < 0.97;
    return ('NULL', 'NULL');
}

sub insert_case {
    my @cols = ('destination');
    my @vals = (sql_text(random_destination()));
    my $topic = random_topic();
    if (defined $topic || chance(0.1)) { push @cols, 'topic'; push @vals, sql_text($topic); }
    my $key = random_key();
    if (defined $key || chance(0.1)) { push @cols, 'key'; push @vals, sql_text($key); }
    my ($p, $pb) = random_payload_columns();
    push @cols, 'payload', 'payload_bytes';
    push @vals, $p, $pb;
    my $h = random_headers();
    if (defined $h || chance(0.1)) { push @cols, 'headers'; push @vals, sql_jsonb($h); }
    my $a = random_time(0.6);
    if ($a ne 'NULL' || chance(0.1)) { push @cols, 'available_at'; push @vals, $a; }
    my $e = random_time(0.7);
    if ($e ne 'NULL') { push @cols, 'expires_at'; push @vals, $e; }
    if (chance(0.04)) {
        my ($c, $v) = @{ pick(['attempts', '1'], ['lease_token', '7'], ['last_error', q{'x'}],
            ['order_key', '1'], ['first_failed_at', 'now()'], ['event_id', 'NULL'],
            ['attempts', '0'], ['order_key', 'NULL'],
            ['event_id', q{'00000000-0000-0000-0000-000000000000'}]) };
        push @cols, $c;
        push @vals, $v;
    }
    return 'INSERT INTO outbox.messages (' . join(', ', @cols) . ') VALUES (' . join(', ', @vals) . ')';
}

my $secret_ok = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

sub random_common_setting {
    my $k = pick('max_attempts', 'retry_base', 'retry_max', 'topic', 'ordering', 'on_dead');
    my %values = (
        max_attempts => ['1', '5', '1000', '0', '1001', '"5"', '2.5', '5.0', '-1', 'null', '[]', '{}', '1e400'],
        retry_base => ['"500ms"', '"2s"', '100', '"1d"', '"2d"', '"soon"', '0', '-5', '1.5', '"1.5s"', 'null', 'true'],
        retry_max => ['"10s"', '"5min"', '"7d"', '"8d"', '1', '"0ms"', '[]', 'null'],
        topic => ['"t1"', '"orders"', '""', '"bad topic"', '5', 'null', json_str("t\r\nX")],
        ordering => ['"key"', '"none"', '"KEY"', '1', 'null'],
        on_dead => ['"block"', '"skip"', '"drop"', 'false'],
    );
    return ($k, pick(@{ $values{$k} }));
}

sub random_kafka_config {
    my @pairs;
    push @pairs, ['bootstrap.servers', pick(json_str($bootstrap), json_str($bootstrap),
        json_str($bootstrap), '""', '" , "', '9092', 'null', '["a:1"]', '"127.0.0.1:1"',
        json_str(nasty_string()))] if chance(0.85);
    for (1 .. int(rand(6))) {
        my $r = rand();
        if ($r < 0.35) {
            push @pairs, [random_common_setting()];
        } elsif ($r < 0.85) {
            my $k = pick('linger.ms', 'batch.size', 'compression.type', 'acks',
                'request.required.acks', 'enable.idempotence', 'message.timeout.ms', 'retries',
                'max.in.flight', 'client.id', 'socket.timeout.ms',
                'queue.buffering.max.messages', 'partitioner', 'transactional.id',
                'internal.termination.signal', 'sasl.password', 'security.protocol',
                'no.such.property', 'dr_msg_cb', 'opaque', 'plugin.library.paths',
                'message.max.bytes', 'Linger.Ms');
            my $v = pick('0', '1', '5', '-1', '"all"', '"1"', 'true', 'false', '"lz4"', '"zstd"',
                '"bogus"', '"PLAINTEXT"', '"random"', '"murmur2_random"', '1000000', '2.5',
                'null', '[]', '{}', json_str(nasty_string()));
            push @pairs, [$k, $v];
        } else {
            push @pairs, [json_str(nasty_string()) =~ s/^"|"$//gr, random_json(2)];
        }
    }
    return \@pairs;
}

sub random_webhook_config {
    my @pairs;
    push @pairs, ['url', pick(json_str($sink->url('/fz/' . int(rand(5)))),
        json_str($sink->url('/fz/' . int(rand(5)))), json_str('http://127.0.0.1:1/refused'),
        '"ftp://x/"', '"http:///x"', '"example.com"', '""', '5', 'null',
        json_str('http://user:pw@127.0.0.1:1/'), json_str('http://' . nasty_string() . '/'))]
      if chance(0.85);
    for (1 .. int(rand(6))) {
        my $r = rand();
        if ($r < 0.35) {
            push @pairs, [random_common_setting()];
        } elsif ($r < 0.85) {
            my $k = pick('secret', 'headers', 'timeout_ms', 'max_in_flight', 'tls_verify',
                'ca_file', 'Secret', 'unknown_key');
            my %values = (
                secret => [json_str($secret_ok), "[" . json_str($secret_ok) . ',"whsec_c2VjcmV0Mg=="]',
                    '"whsec_!!"', '"nope"', '[]', '5', 'null', '["whsec_c2VjcmV0", 1]'],
                headers => [random_headers() // '{}', '{"x-static":"yes"}', '[]', '"x"', 'null'],
                timeout_ms => ['5000', '"5s"', '0', '600001', '"10min"', '"x"', '[]'],
                max_in_flight => ['1', '32', '1024', '1025', '0', '"8"', '2.0'],
                tls_verify => ['true', 'false', '"false"', '0', 'null'],
                ca_file => ['"/nonexistent/ca.pem"', '"/etc"', '""', '5', 'null'],
                Secret => ['"x"'],
                unknown_key => ['1'],
            );
            push @pairs, [$k, pick(@{ $values{$k} })];
        } else {
            push @pairs, [json_str(nasty_string()) =~ s/^"|"$//gr, random_json(2)];
        }
    }
    return \@pairs;
}

sub config_json {
    my ($pairs) = @_;
    return '{' . join(',', map { '"' . $_->[0] . '":' . $_->[1] } @$pairs) . '}';
}

sub create_case {
    my $name = chance(0.85) ? pick(@created)
        : pick(undef, '', 'has space', 'x' x 64, "caf\x{e9}", '-lead', '_lead', 'k_good',
            nasty_string());
    my $kind = chance(0.92) ? pick('kafka', 'webhook') : pick(undef, '', 'rabbitmq', 'KAFKA');
    my $config;
    my $r = rand();
    if ($r < 0.05) {
        $config = pick(undef, '[]', '"x"', 'null', '1', '[{"url":"http://x/"}]');
    } else {
        my $k = defined $kind && $kind eq 'webhook' ? 'webhook' : 'kafka';
        $k = pick('kafka', 'webhook') if chance(0.1);   # the other kind's config
        $config = config_json($k eq 'kafka' ? random_kafka_config() : random_webhook_config());
    }
    return 'SELECT outbox.create_destination(' . join(', ', sql_text($name), sql_text($kind),
        sql_jsonb($config)) . ')';
}

sub alter_case {
    my $name = chance(0.95) ? pick(@created) : pick('nope', undef);
    my $pairs = chance(0.5) ? random_kafka_config() : random_webhook_config();
    # alter merges: null removes a key
    push @$pairs, [pick('retry_max', 'topic', 'linger.ms', 'secret'), 'null'] if chance(0.3);
    my $config = chance(0.05) ? pick(undef, '[]', '"x"') : config_json($pairs);
    return 'SELECT outbox.alter_destination(' . sql_text($name) . ', ' . sql_jsonb($config) . ')';
}

sub drop_case {
    return 'SELECT outbox.drop_destination(' . sql_text(pick(@created, 'nope'))
      . (chance(0.5) ? ', force => true' : '') . ')';
}

sub pause_case {
    return 'SELECT outbox.' . pick('pause', 'resume') . '(' . sql_text(pick(@created, 'nope')) . ')';
}

#-------------------------------------------------------------------------------------------
# The fixed destinations most messages go to (all deliverable once the workers run).
#-------------------------------------------------------------------------------------------
my $hook_url = $sink->url('/good');
my $ordered_url = $sink->url('/ordered');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('k_good', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "fuzz"}');
    SELECT outbox.create_destination('k_notopic', 'kafka', '{"bootstrap.servers": "$bootstrap"}');
    SELECT outbox.create_destination('k_ordered', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "fuzz.ordered", "ordering": "key", "on_dead": "skip"}');
    SELECT outbox.create_destination('h_good', 'webhook', '{"url": "$hook_url", "secret": "$secret_ok", "max_attempts": 3}');
    SELECT outbox.create_destination('h_ordered', 'webhook', '{"url": "$ordered_url", "ordering": "key", "on_dead": "skip", "max_attempts": 3}')});

#-------------------------------------------------------------------------------------------
# The cases, in a deterministic order, run by four psql sessions one after the other.
#-------------------------------------------------------------------------------------------
my @cases;
push @cases, ['create', create_case()] for 1 .. 500;   # destinations first, so inserts find some
for (1 .. 2600) {
    my $r = rand();
    push @cases, $r < 0.80 ? ['insert', insert_case()]
        : $r < 0.90 ? ['create', create_case()]
        : $r < 0.97 ? ['alter', alter_case()]
        : $r < 0.985 ? ['pause', pause_case()]
        : ['drop', drop_case()];
}
note(scalar(@cases) . ' cases');

my (%accepted, %refused, %states, @internal);
my $t0 = time;
my $per_session = int(@cases / 4) + 1;
for (my $start = 0; $start < @cases; $start += $per_session) {
    my $end = $start + $per_session - 1;
    $end = $#cases if $end > $#cases;
    my $sql = "\\set SHOW_CONTEXT never\n";
    for my $i ($start .. $end) {
        $sql .= "$cases[$i][1];\n\\echo \@\@ $i $cases[$i][0] :SQLSTATE\n";
    }
    my ($out, $err) = ('', '');
    $node->psql('postgres', $sql, stdout => \$out, stderr => \$err, on_error_stop => 0,
        timeout => 600);
    my $seen = 0;
    for my $line (split /\n/, $out) {
        next unless $line =~ /^\@\@ (\d+) (\w+) (\w+)$/;
        my ($i, $kind, $state) = ($1, $2, $3);
        $seen++;
        if ($state eq '00000') {
            $accepted{$kind}++;
        } else {
            $refused{$kind}++;
            $states{"$kind $state"}++;
            push @internal, "$state: $cases[$i][1]" if $state =~ /^(XX|58|53|57|08)/;
        }
    }
    is($seen, $end - $start + 1, "session for cases $start..$end ran every statement");
    my @fatal = $err =~ /^(.*(?:FATAL|PANIC|server closed the connection|terminated).*)$/mg;
    is(scalar(@fatal), 0, "session for cases $start..$end: no connection lost")
      or diag(join("\n", @fatal[0 .. ($#fatal < 4 ? $#fatal : 4)]));
}
my $took = time - $t0;
for my $kind (qw(insert create alter pause drop)) {
    diag(sprintf('FUZZ %-6s accepted %4d, refused %4d', $kind, $accepted{$kind} // 0,
        $refused{$kind} // 0));
}
diag(sprintf('FUZZ %d statements in %.1f s', scalar(@cases), $took));
diag('FUZZ refusals by SQLSTATE: '
      . join(', ', map { "$_ x$states{$_}" } sort keys %states));
cmp_ok($accepted{insert} // 0, '>', 300, 'the fuzz produced a good share of accepted messages');
cmp_ok($refused{insert} // 0, '>', 300, 'and of refused ones');
cmp_ok($accepted{create} // 0, '>', 20, 'some destinations were accepted');
cmp_ok($refused{create} // 0, '>', 200, 'many were refused');
is(scalar(@internal), 0, 'no statement failed with an internal or resource error')
  or diag(join("\n", map { substr($_, 0, 400) } @internal[0 .. ($#internal < 9 ? $#internal : 9)]));

#-------------------------------------------------------------------------------------------
# The server survived, and what was accepted holds to the rules.
#-------------------------------------------------------------------------------------------
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server answers');
is((split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0], $postmaster_pid,
    'the postmaster is the same process');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|PANIC/, 'no backend crashed during the fuzz');

my ($ok, $out, $err) = $node->psql('postgres', 'UPDATE outbox.destinations SET config = config');
is($ok, 0, 'every accepted destination passes the check again') or diag($err);
my $ndest = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.destinations');
diag("FUZZ destinations defined at the end: $ndest");

is($node->safe_psql('postgres', q{
    SELECT count(*) FROM outbox.messages m
     WHERE NOT EXISTS (SELECT FROM outbox.destinations d WHERE d.name = m.destination)}),
    '0', 'every accepted message names an existing destination');
is($node->safe_psql('postgres', q{
    SELECT count(*) FROM outbox.messages m JOIN outbox.destinations d ON d.name = m.destination
     WHERE d.kind = 'kafka' AND (m.topic IS NULL OR m.topic !~ '^[A-Za-z0-9._-]{1,249}$'
                                 OR m.topic IN ('.', '..'))}),
    '0', 'every accepted Kafka message has a valid topic');
is($node->safe_psql('postgres', q{
    SELECT count(*) FROM outbox.messages m JOIN outbox.destinations d ON d.name = m.destination
     WHERE m.payload IS NOT NULL AND m.payload_bytes IS NOT NULL
        -- neither: a Kafka tombstone, which needs a key
        OR m.payload IS NULL AND m.payload_bytes IS NULL AND (d.kind <> 'kafka' OR m.key IS NULL)
        OR octet_length(m.payload_bytes) > 1048576
        OR m.key IS NOT NULL AND octet_length(m.key) > 1024
        OR m.expires_at <= m.available_at
        OR m.available_at > now() + interval '366 days'
        OR m.attempts <> 0 OR m.lease_token IS NOT NULL OR m.last_error IS NOT NULL
        OR m.first_failed_at IS NOT NULL}),
    '0', 'one payload (or a keyed Kafka tombstone), keys, times and relay-owned columns as the rules say');
is($node->safe_psql('postgres', q{
    SELECT count(*) FROM outbox.messages m WHERE octet_length(m.payload::text) > 1048576}),
    '0', 'no accepted JSON payload is larger than outbox.max_payload_bytes when delivered');
is($node->safe_psql('postgres', q{
    SELECT count(*) FROM outbox.messages m
     WHERE m.headers IS NOT NULL AND (
           jsonb_typeof(m.headers) <> 'object'
        OR (SELECT count(*) FROM jsonb_object_keys(m.headers)) > 64
        OR EXISTS (SELECT FROM jsonb_each(m.headers) h(k, v)
                    WHERE jsonb_typeof(h.v) <> 'string'
                       OR h.k !~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]+$' OR octet_length(h.k) > 256
                       OR octet_length(h.v #>> '{}') > 8192
                       OR (h.v #>> '{}') ~ '[\r\n]'
                       OR lower(h.k) IN ('host', 'content-length', 'transfer-encoding',
                            'connection', 'keep-alive', 'te', 'trailer', 'upgrade', 'expect',
                            'webhook-id', 'webhook-timestamp', 'webhook-signature', 'ce-id',
                            'ce-source', 'ce-time', 'ce-specversion', 'ce_id',
                            'ce_source', 'ce_time', 'ce_specversion')
                       OR lower(h.k) LIKE 'proxy-%'
                       -- the producer's CloudEvents type: never empty
                       OR lower(h.k) IN ('ce_type', 'ce-type') AND h.v #>> '{}' = '')
        OR (SELECT count(*) FROM jsonb_object_keys(m.headers) k
             WHERE lower(k) IN ('ce_type', 'ce-type')) > 1)}),
    '0', 'every accepted header is a sendable, unreserved string header (ce_type once, not empty)');
is($node->safe_psql('postgres', q{
    SELECT count(*) FROM outbox.messages m JOIN outbox.destinations d ON d.name = m.destination
     WHERE d.kind = 'webhook' AND m.topic ~ '[\x01-\x08\x0a-\x1f\x7f]'}),
    '0', 'no accepted webhook message has control characters in its topic (its ce-type header)');
my $queued = $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages');
diag("FUZZ messages queued at the end: $queued");

#-------------------------------------------------------------------------------------------
# The workers take it all on: messages to the sink and the broker are delivered (or
# dead-lettered), nothing crashes, nothing is injected into a request.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.databases = 'postgres'; SELECT pg_reload_conf()});
ok(wait_until(sub { scalar(worker_pids($node)) >= 1 }, 30), 'the worker starts');
my ($worker) = worker_pids($node);
my $fixed_list = join(',', map { "'$_'" } @fixed);
ok(wait_until(sub {
        $node->safe_psql('postgres', qq{
            SELECT coalesce(sum(pending + in_flight + retrying), 0) FROM outbox.stats()
             WHERE destination IN ($fixed_list)}) eq '0' }, 180),
    'every due message of the sink and broker destinations is done');
# outbox.stats() keeps its gauges in shared memory; once the fixed destinations are settled they
# must agree with the table (and outbox.conservation() must balance). What is ahead (not due
# yet) is every unordered message and the first message of each key, with available_at in the
# future; the rest is pending or waiting behind a blocked key.
is($node->safe_psql('postgres', qq{
    WITH heads AS (
        SELECT DISTINCT ON (order_key) id FROM outbox.messages
         WHERE order_key IS NOT NULL ORDER BY order_key, id
    ), rows AS (
        SELECT m.destination, m.attempts, m.lease_token,
               (m.order_key IS NULL OR m.id IN (SELECT id FROM heads))
                   AND m.available_at > now() AS ahead
          FROM outbox.messages AS m
    ), t AS (
        SELECT destination, count(*) FILTER (WHERE NOT ahead) AS pw,
               count(*) FILTER (WHERE ahead AND attempts = 0 AND lease_token IS NULL) AS sch
          FROM rows GROUP BY destination)
    SELECT coalesce(string_agg(format('%s: stats pending + waiting %s scheduled %s, table %s %s',
                                      s.destination, s.pending + s.waiting, s.scheduled,
                                      coalesce(t.pw, 0), coalesce(t.sch, 0)), '; '), '')
      FROM outbox.stats() s LEFT JOIN t ON t.destination = s.destination
     WHERE s.destination IN ($fixed_list)
       AND (s.pending + s.waiting, s.scheduled) IS DISTINCT FROM (coalesce(t.pw, 0), coalesce(t.sch, 0))}),
    '', 'outbox.stats() agrees with the table for the settled destinations');
is($node->safe_psql('postgres', qq{
    SELECT coalesce(string_agg(destination || ' balance ' || balance, ', '), '')
      FROM outbox.conservation() WHERE destination IN ($fixed_list) AND balance <> 0}),
    '', 'outbox.conservation() balances');
my $stats = $node->safe_psql('postgres', qq{
    SELECT string_agg(format('%s delivered %s dead %s scheduled %s waiting %s',
                             destination, delivered_total, dead, scheduled, waiting), '; ')
      FROM outbox.stats() WHERE destination IN ($fixed_list)});
diag("FUZZ $stats");
cmp_ok($node->safe_psql('postgres', qq{
    SELECT sum(delivered_total) FROM outbox.stats() WHERE destination IN ($fixed_list)}),
    '>', 100, 'the workers delivered the accepted messages');
# The headers of every request the sink recorded (only they are decoded: JSON::PP is slow on
# the megabyte bodies).
my @requests;
{
    open my $fh, '<', "$sink->{dir}/requests.jsonl" or die $!;
    while (my $line = <$fh>) {
        my $from = index($line, ',"headers":');
        my $to = index($line, ',"body_b64":');
        next if $from < 0 || $to < $from;   # a line being written
        push @requests, { headers => decode_json(substr($line, $from + 11, $to - $from - 11)) };
    }
    close $fh;
}
cmp_ok(scalar(@requests), '>', 100, scalar(@requests) . ' requests reached the sink');
my @injected = grep { exists $_->{headers}{'x-injected'} } @requests;
is(scalar(@injected), 0, 'no request carries a header that was injected through a value')
  or diag('injected via: ' . join(' | ', map { JSON::PP->new->ascii->encode({
      'ce-type' => $_->{headers}{'ce-type'} }) } @injected[0 .. ($#injected < 2 ? $#injected : 2)]));
my @ctl = grep { my $h = $_->{headers}; grep { /[\x00-\x08\x0a-\x1f\x7f]/ } values %$h } @requests;
is(scalar(@ctl), 0, 'no request carries a control character in a header value');
is(join(',', worker_pids($node)), $worker, 'the worker that started is still the one running');
unlike(slurp_file($node->logfile), qr/outbox worker stopped/, 'the worker never stopped on an error');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server answers after delivery');

$node->stop;
is((grep { /terminated by signal/ } split /\n/, slurp_file($node->logfile)), 0,
    'no process terminated by a signal');
check_server_log($node);
$broker->stop;
$sink->stop;
done_testing();
