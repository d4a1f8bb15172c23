# A Kafka destination using SASL/OAUTHBEARER with librdkafka's built-in unsecured JWT
# (enable.sasl.oauthbearer.unsecure.jwt) and a sasl.oauthbearer.config librdkafka cannot parse:
# the config is a secret, so it must not reach the server log, and the destination must not
# take the server down (librdkafka 2.0.2 crashes in its token refresh retry, 10 s after such a
# failure, inside the worker process).
use strict;
use warnings;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $broker = kafka_broker();
my $node = outbox_node('oauthbearer', conf => join("\n", "log_statement = 'none'",
    "outbox.lease_timeout = '10s'"));
my $postmaster_pid = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];

my $marker = sprintf('OAUTHMARK%d%06d', $$, int(rand(1_000_000)));
my $config = JSON::PP->new->canonical->encode({ 'bootstrap.servers' => $broker->bootstrap,
    topic => 'oauth', 'security.protocol' => 'SASL_PLAINTEXT', 'sasl.mechanisms' => 'OAUTHBEARER',
    'enable.sasl.oauthbearer.unsecure.jwt' => 'true',
    'sasl.oauthbearer.config' => "$marker=1 principal=outbox" });
my ($rc, $out, $err) = $node->psql('postgres', "SELECT outbox.create_destination('oauth', 'kafka', '$config')");
if ($rc == 0) {
    pass('the destination was accepted; the worker tries it');
    $node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) SELECT 'oauth', '{}' FROM generate_series(1, 3)});
    ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT last_error IS NOT NULL FROM outbox.stats() WHERE destination = 'oauth'}) eq 't' }, 30),
        'the failure is recorded');
    is($node->safe_psql('postgres', qq{SELECT count(*) FROM outbox.stats() s WHERE row_to_json(s)::text LIKE '%$marker%'}),
        '0', 'the sasl.oauthbearer.config (a secret) is not in outbox.stats()');
    sleep 15;   # librdkafka retries the token 10 s after the failure, by its own timer: nothing to wait on
} else {
    like($err, qr/sasl\.oauthbearer/, 'the destination was refused at definition time');
    unlike($err, qr/$marker/, 'and the error does not show the secret config');
}
my ($alive) = $node->psql('postgres', 'SELECT 1');
is($alive, 0, 'the server still answers');
is((split /\n/, (eval { slurp_file($node->data_dir . '/postmaster.pid') } // ''))[0] // '', $postmaster_pid,
    'the postmaster never restarted');
my $log = slurp_file($node->logfile);
my @crashes = grep { index($_, 'terminated by signal') >= 0 } split /\n/, $log;
is(scalar(@crashes), 0, 'no server process crashed') or diag($crashes[0]);
my @leaks = grep { index($_, $marker) >= 0 && !/STATEMENT:/ } split /\n/, $log;
is(scalar(@leaks), 0, 'the sasl.oauthbearer.config (a secret) is not in the server log')
  or diag(substr($leaks[0], 0, 300));

$node->stop('immediate', fail_ok => 1);
$broker->stop;
done_testing();
