# Webhooks cannot reach the server's own network unless a superuser allows it (issue 16: a role
# with EXECUTE on create_destination had webhooks sent to 127.0.0.1, 0.0.0.0, 2130706433,
# localhost, [::1], the PostgreSQL port and 169.254.169.254, and read the answers in the dead
# letters). Without outbox.webhook_allowed_networks, every one of them is refused when it is
# defined; defined while allowed and then refused by a reload, every one is refused when the
# connection would be opened (a name such as localhost is resolved only then): dead-lettered
# with the address named, no request reaching a sink listening there. Allowed, they are sent.
# Response bodies reach last_error only for destinations a superuser configured.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $sink6 = webhook_sink(bind => '::1');
my $node = outbox_node('ssrf', conf => join("\n", "outbox.webhook_allowed_networks = ''",
    "outbox.retry_base = '50ms'", "outbox.retry_max = '200ms'"));
my ($p4, $p6, $pg) = ($sink->port, $sink6->port, $node->port);
my %url = (
    loopback => "http://127.0.0.1:$p4/loopback",
    unspecified => "http://0.0.0.0:$p4/unspecified",
    decimal => "http://2130706433:$p4/decimal",
    localhost => "http://localhost:$p4/localhost",
    ipv6 => "http://[::1]:$p6/ipv6",
    postgres => "http://127.0.0.1:$pg/",
    metadata => 'http://169.254.169.254/latest/meta-data/',
);
my %address = (loopback => '127.0.0.1', unspecified => '0.0.0.0', decimal => '127.0.0.1',
    localhost => '(127\.0\.0\.1|::1)', ipv6 => '::1', postgres => '127.0.0.1',
    metadata => '169.254.169.254');
sub create {
    my ($name, %extra) = @_;
    my $config = JSON::PP->new->canonical->encode({ url => $url{$name}, max_attempts => 3,
        timeout_ms => 1000, %extra });
    return $node->psql('postgres', "SELECT outbox.create_destination('$name', 'webhook', '$config')");
}
sub sink_requests { return scalar(@{ $sink->requests }) + scalar(@{ $sink6->requests }); }

# 1. Defined without the setting: each refused, with the address it names.
for my $name (sort keys %url) {
    my ($ret, $out, $err) = create($name);
    my $shown = $name eq 'localhost' ? 'host localhost \(127\.0\.0\.1, ::1\)' : "address $address{$name}";
    like($err, qr/ERROR:  permission denied to configure webhook destination "$name": its URL names $shown, which is not allowed by outbox.webhook_allowed_networks/,
        "$name ($url{$name}) is refused by create_destination");
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.destinations'), '0', 'none was created');

# 2. Defined while allowed, then refused by a reload: refused when connecting.
$node->append_conf('postgresql.conf',
    "outbox.webhook_allowed_networks = '127.0.0.0/8, ::1, 0.0.0.0/32, 169.254.0.0/16'\n");
ok(reload_and_wait($node, 'outbox.webhook_allowed_networks', '127.0.0.0/8, ::1, 0.0.0.0/32, 169.254.0.0/16'),
    'the reload is read');
for my $name (sort keys %url) {
    my ($ret, $out, $err) = create($name);
    is($ret, 0, "$name is accepted while its network is allowed") or diag($err);
    $node->safe_psql('postgres', qq{SELECT outbox.pause('$name');
        INSERT INTO outbox.messages (destination, payload) VALUES ('$name', '{"to": "$name"}')});
}
$node->append_conf('postgresql.conf', "outbox.webhook_allowed_networks = ''\n");
ok(reload_and_wait($node, 'outbox.webhook_allowed_networks', ''), 'the worker has read the empty list');
$node->safe_psql('postgres', "SELECT outbox.resume('$_')") for sort keys %url;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq scalar(keys %url) }, 30),
    'every message is dead-lettered');
my %dead = map { split /\|/, $_, 2 } split /\n/,
    $node->safe_psql('postgres', q{SELECT destination, reason || ' ' || last_error FROM outbox.dead_letters});
for my $name (sort keys %url) {
    like($dead{$name} // '', qr/^rejected address $address{$name} is not allowed by outbox.webhook_allowed_networks/,
        "$name: refused when connecting, and the dead letter names the address");
}
like(stats_row($node, 'localhost')->{last_error} // '', qr/is not allowed by outbox.webhook_allowed_networks/,
    'stats().last_error says so too');
is(sink_requests(), 0, 'no request reached a sink');
is($node->safe_psql('postgres', 'SELECT sum(failed_total) - sum(dead_lettered_total) FROM outbox.stats()'), '0',
    'no retries: a refused address is a permanent failure');

# 3. Allowed: requeued, they are sent (0.0.0.0 is not loopback: it needs its own entry).
$node->append_conf('postgresql.conf', "outbox.webhook_allowed_networks = '127.0.0.0/8, ::1'\n");
ok(reload_and_wait($node, 'outbox.webhook_allowed_networks', '127.0.0.0/8, ::1'), 'the worker has read the list');
$node->safe_psql('postgres', "SELECT outbox.requeue('$_')") for sort keys %url;
for my $name (qw(loopback decimal localhost ipv6)) {
    my $s = $name eq 'ipv6' ? $sink6 : $sink;
    ok(wait_until(sub { grep { $_->{path} eq "/$name" && $_->{status} == 204 } @{ $s->requests } }, 30),
        "$name: delivered once allowed");
}
ok(wait_until(sub { ($node->safe_psql('postgres', q{SELECT last_error FROM outbox.dead_letters WHERE destination = 'unspecified'}) // '')
    =~ /address 0.0.0.0 is not allowed/ }, 30), '0.0.0.0 is still refused with 127.0.0.0/8 listed');
$node->append_conf('postgresql.conf',
    "outbox.webhook_allowed_networks = '127.0.0.0/8, ::1, 0.0.0.0/32, 169.254.169.254'\n");
ok(reload_and_wait($node, 'outbox.webhook_allowed_networks', '127.0.0.0/8, ::1, 0.0.0.0/32, 169.254.169.254'),
    'the worker has read the list');
$node->safe_psql('postgres', "SELECT outbox.requeue('$_')") for qw(unspecified metadata);
ok(wait_until(sub { grep { $_->{path} eq '/unspecified' && $_->{status} == 204 } @{ $sink->requests } }, 30),
    'unspecified: delivered once 0.0.0.0 is listed');
# Allowed, the PostgreSQL port and the metadata address are connected to (PostgreSQL does not
# speak HTTP; nothing answers at 169.254.169.254 here): they fail as any endpoint would.
ok(wait_until(sub {
    my $e = $node->safe_psql('postgres', q{SELECT string_agg(coalesce(m.last_error, d.last_error), '|')
        FROM (SELECT 'postgres' AS n) x LEFT JOIN outbox.messages m ON m.destination = x.n
        LEFT JOIN outbox.dead_letters d ON d.destination = x.n});
    $e ne '' && $e !~ /not allowed/ }, 30), 'postgres port: connected to once allowed');
ok(wait_until(sub {
    my $e = stats_row($node, 'metadata')->{last_error} // '';
    $e ne '' && $e !~ /not allowed/ }, 30), 'metadata address: connected to once allowed');

# 4. Response bodies: quoted only for a destination a superuser configured.
$node->safe_psql('postgres', q{
    CREATE ROLE platform LOGIN;
    GRANT USAGE ON SCHEMA outbox TO platform;
    GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb) TO platform;
    CREATE ROLE ops LOGIN;
    GRANT USAGE ON SCHEMA outbox TO ops;
    GRANT SELECT ON outbox.messages, outbox.dead_letters TO ops;
    GRANT EXECUTE ON FUNCTION outbox.stats() TO ops;
});
my $forbidden = $sink->url('/internal;status=403;body=token%3Dsecret-of-the-internal-service');
my ($ret, $out, $err) = $node->psql('postgres',
    qq{SELECT outbox.create_destination('tenant', 'webhook', '{"url": "$forbidden"}')},
    extra_params => ['-U', 'platform']);
is($ret, 0, 'the platform role creates a webhook to an allowed network') or diag($err);
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('admin', 'webhook', '{"url": "$forbidden"}');
    INSERT INTO outbox.messages (destination, payload) VALUES ('tenant', '{}'), ('admin', '{}')});
ok(wait_until(sub { $node->safe_psql('postgres',
    q{SELECT count(*) FROM outbox.dead_letters WHERE destination IN ('tenant', 'admin')}) eq '2' }, 30),
    'both dead-lettered (403)');
my $as_ops = sub { my ($sql) = @_; my (undef, $o) = $node->psql('postgres', $sql, extra_params => ['-U', 'ops']); $o };
is($as_ops->(q{SELECT last_error FROM outbox.dead_letters WHERE destination = 'tenant'}), 'HTTP 403',
    "the platform role's destination: the status alone in dead_letters.last_error");
is($as_ops->(q{SELECT last_error FROM outbox.stats() WHERE destination = 'tenant'}), 'HTTP 403',
    'and in stats().last_error');
unlike($as_ops->(q{SELECT string_agg(last_error, ' ') FROM outbox.dead_letters}) . $as_ops->(q{SELECT string_agg(last_error, ' ') FROM outbox.stats()}),
    qr/secret-of-the-internal-service.*tenant|tenant.*secret-of-the-internal-service/s, 'the body is nowhere for it');
is($as_ops->(q{SELECT last_error FROM outbox.dead_letters WHERE destination = 'admin'}),
    'HTTP 403: token=secret-of-the-internal-service', "a superuser's destination quotes the body");
is($node->safe_psql('postgres', q{SELECT string_agg(name || '=' || created_by_superuser, ',' ORDER BY name)
    FROM outbox.destinations WHERE name IN ('tenant', 'admin')}), 'admin=true,tenant=false',
    'as outbox.destinations.created_by_superuser records');

# 5. The setting is the superuser's.
($ret, $out, $err) = $node->psql('postgres', 'SHOW outbox.webhook_allowed_networks', extra_params => ['-U', 'platform']);
# 15: "must be superuser or have privileges of pg_read_all_settings to examine"; 16+: "permission
# denied to examine", with the role in the detail.
like($err, qr/(?:must be superuser or have privileges of pg_read_all_settings|permission denied) to examine "outbox.webhook_allowed_networks"/,
    'other roles cannot read it');
($ret, $out, $err) = $node->psql('postgres', q{SET outbox.webhook_allowed_networks = '0.0.0.0/0'});
like($err, qr/parameter "outbox.webhook_allowed_networks" cannot be changed now/, 'nor can a session change it');
($ret, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET outbox.webhook_allowed_networks = '10.0.0.0/33'});
like($err, qr/invalid value for parameter "outbox.webhook_allowed_networks": "10.0.0.0\/33"\nDETAIL:  "10.0.0.0\/33" has a prefix length above 32\./,
    'a bad list is refused with the entry named');

$node->stop;
check_server_log($node);
$sink->stop;
$sink6->stop;
done_testing();
