# TLS for the redis kind: a Redis server with only a TLS listener, its certificate from a CA the
# test makes with openssl; a destination with "ca_file" (and AUTH as an ACL user) delivers to it (the certificate checked
# for the address it names), one without the CA is an outage (nothing dead-lettered, no attempt
# spent, last_error says the certificate was not trusted), one with "tls_verify": false delivers.
# outbox-tap: redis shared -- a server of its own
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $dir = PostgreSQL::Test::Utils::tempdir();
PostgreSQL::Test::Utils::append_to_file("$dir/ext.cnf", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
for my $cmd (
    "openssl req -x509 -newkey rsa:2048 -nodes -keyout $dir/ca.key -out $dir/ca.pem -days 2 -subj /CN=outbox-test-ca",
    "openssl req -newkey rsa:2048 -nodes -keyout $dir/server.key -out $dir/server.csr -subj /CN=localhost",
    "openssl x509 -req -in $dir/server.csr -CA $dir/ca.pem -CAkey $dir/ca.key -CAcreateserial -out $dir/server.pem -days 2 -extfile $dir/ext.cnf")
{
    system("$cmd >/dev/null 2>&1") == 0 or die "failed: $cmd";
}
my $tls_port = PostgreSQL::Test::Cluster::get_free_port();
# The plain port stays (redis_node checks readiness on it); the destinations use the TLS one.
my $redis = redis_node(args => ['--tls-port', $tls_port, '--tls-cert-file', "$dir/server.pem",
    '--tls-key-file', "$dir/server.key", '--tls-ca-cert-file', "$dir/ca.pem",
    '--tls-auth-clients', 'no']);
my $node = outbox_node('redis_tls', conf => "outbox.max_attempts = 1\n");
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('verified', 'redis',
        '{"server": "rediss://127.0.0.1:$tls_port", "stream": "allowed.tls.verified", "ca_file": "$dir/ca.pem",
          "user": "outbox", "password": "outbox-secret"}');
    SELECT outbox.create_destination('untrusted', 'redis',
        '{"server": "rediss://127.0.0.1:$tls_port", "stream": "tls.untrusted"}');
    SELECT outbox.create_destination('unverified', 'redis',
        '{"server": "127.0.0.1:$tls_port", "tls": true, "tls_verify": false, "stream": "tls.unverified"}');
    INSERT INTO outbox.messages (destination, payload)
    SELECT d, jsonb_build_object('n', g) FROM generate_series(1, 100) g,
           unnest(ARRAY['verified', 'untrusted', 'unverified']) d;
});
ok(wait_until(sub { stats_row($node, 'verified')->{delivered_total} == 100
        && stats_row($node, 'unverified')->{delivered_total} == 100 }, 60),
    'with ca_file, and with tls_verify false: all 100 delivered over TLS');
is(join(',', map { $redis->count($_) } qw(allowed.tls.verified tls.unverified)), '100,100',
    'both streams hold their 100 entries');
ok(wait_until(sub { (stats_row($node, 'untrusted')->{last_error} // '') =~ /certificate/ }, 30),
    'without the CA: the certificate is not trusted');
like(stats_row($node, 'untrusted')->{last_error},
    qr/^deferred, destination unreachable: cannot connect to Redis at 127\.0\.0\.1:\d+: TLS handshake failed: certificate verification: self-signed certificate in certificate chain$/,
    'an outage, with the reason');
my $u = stats_row($node, 'untrusted');
is($u->{pending} + $u->{in_flight}, 100, 'its 100 messages wait');
is($u->{failed_total}, 0, 'no attempt spent on them (max_attempts is 1)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

$node->stop;
check_server_log($node);
$redis->stop;
done_testing();
