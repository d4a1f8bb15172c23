# Real Apache Kafka, SASL_SSL with the test CA:
#   - a wrong password is an outage: messages wait without spending an attempt, last_error
#     names the authentication failure, the password appears nowhere (server log, last_error,
#     stats(), workers()); alter_destination with the right one delivers everything;
#   - SCRAM-SHA-512: delivered with librdkafka 2.6.1 or later; with an older librdkafka (Debian
#     12 has 2.0.2), which Apache Kafka 4.x refuses whatever the password, an outage whose
#     last_error says so, and PLAIN over the same SASL_SSL listener delivers;
#   - TLS: without ssl.ca.location the broker's certificate is not trusted (an outage); with the
#     test CA (a superuser's setting) it is, and the messages are delivered.
# outbox-tap: kafka-cluster shared
use strict;
use warnings;
use JSON::PP;
use OutboxKafka;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $kafka = kafka_cluster();
$kafka->create_topic([ 'secure', 'scram', 'tls' ], partitions => 4);
$kafka->acl('add', principal => 'User:secure', operations => [ 'Write', 'Describe' ], topic => '*');
# A 10 s lease: librdkafka's message.timeout.ms is 5 s, so deferrals come quickly.
my $node = outbox_node('realkafka_sasl', conf => "outbox.lease_timeout = '10s'\nlog_statement = 'none'");
sub sql { $node->safe_psql('postgres', $_[0]) }
my $password = $kafka->password('secure');
my $wrong = 'wrong-' . join('', map { ('a' .. 'z')[ rand 26 ] } 1 .. 16);

sub config {
    my (%o) = @_;   # a setting given as undef is left out
    my %c = ('bootstrap.servers' => $kafka->sasl_bootstrap, 'security.protocol' => 'SASL_SSL',
        'sasl.mechanisms' => 'PLAIN', 'sasl.username' => 'secure',
        'ssl.ca.location' => $kafka->ca_file, %o);
    delete $c{$_} for grep { !defined $c{$_} } keys %c;
    return JSON::PP->new->canonical->encode(\%c);
}
sub event_ids_of { [ split /\n/, sql("SELECT event_id FROM outbox.messages WHERE destination = '$_[0]'") ] }

# An outage that spends nothing, then the fix: every message arrives.
sub outage_then_fix {
    my ($dest, $topic, $error_re, $what, $fix) = @_;
    produce($node, $dest, 1, 100, key => 'k');
    ok(wait_until(sub { (stats_row($node, $dest)->{last_error} // '') =~ $error_re
                        && stats_row($node, $dest)->{deferred_total} > 0 }, 60),
        "$what: the messages are deferred, last_error says why")
      or diag(explain(stats_row($node, $dest)));
    my $deferred = stats_row($node, $dest)->{deferred_total};
    produce($node, $dest, 101, 200, key => 'k');
    ok(wait_until(sub { stats_row($node, $dest)->{deferred_total} > $deferred }, 60),
        "$what: more probes fail meanwhile");
    my $s = stats_row($node, $dest);
    diag("$what: last_error: $s->{last_error}");
    is($s->{failed_total}, 0, "$what: no attempt spent");
    is($s->{dead}, 0, "$what: nothing dead-lettered");
    is($s->{pending} + $s->{in_flight}, 200, "$what: all 200 wait");
    my $produced = event_ids_of($dest);
    sql("SELECT outbox.alter_destination('$dest', \$cfg\$$fix\$cfg\$)");
    ok(wait_until(sub { queued($node, $dest) == 0 }, 90), "$what: all delivered after alter_destination")
      or diag(explain(stats_row($node, $dest)));
    $s = stats_row($node, $dest);
    is($s->{failed_total}, 0, "$what: still no attempt spent");
    is($s->{dead}, 0, "$what: nothing dead-lettered");
    fault_summary("realkafka_$dest", produced => $produced, received => $kafka->event_ids($topic));
}

# 1. A wrong password.
sql("SELECT outbox.create_destination('secure', 'kafka', \$cfg\$" . config('sasl.password' => $wrong, topic => 'secure') . "\$cfg\$)");
outage_then_fix('secure', 'secure', qr/_AUTHENTICATION: .*Authentication failed/, 'wrong password',
    JSON::PP->new->encode({ 'sasl.password' => $password }));
my $log = slurp_file($node->logfile);
like($log, qr/Authentication failed/, 'the server log has the authentication failure');
for my $secret ($wrong, $password) {
    my $which = $secret eq $wrong ? 'the wrong password' : 'the password';
    unlike($log, qr/\Q$secret\E/, "the server log does not contain $which");
    unlike(sql('SELECT coalesce(string_agg(s::text, \' \'), \'\') FROM outbox.stats() s'), qr/\Q$secret\E/,
        "stats() does not show $which");
    unlike(sql('SELECT coalesce(string_agg(w::text, \' \'), \'\') FROM outbox.workers() w'), qr/\Q$secret\E/,
        "workers() does not show $which");
}

# 2. SCRAM-SHA-512 with the right password.
my $rdkafka = kafka_librdkafka_version();
sql("SELECT outbox.create_destination('scram', 'kafka', \$cfg\$"
      . config('sasl.mechanisms' => 'SCRAM-SHA-512', 'sasl.password' => $password, topic => 'scram') . "\$cfg\$)");
if ($rdkafka >= 20601) {
    produce($node, 'scram', 1, 200, key => 'k');
    my $produced = event_ids_of('scram');
    ok(wait_until(sub { queued($node, 'scram') == 0 }, 60), "SCRAM-SHA-512 (librdkafka $rdkafka): delivered");
    is(stats_row($node, 'scram')->{failed_total}, 0, 'SCRAM-SHA-512: no attempt spent');
    fault_summary('realkafka_scram', produced => $produced, received => $kafka->event_ids('scram'));
} else {
    outage_then_fix('scram', 'scram', qr/_AUTHENTICATION: .*cannot do SCRAM with Kafka 4\.x brokers, whatever the password/,
        "SCRAM-SHA-512 with librdkafka $rdkafka", '{"sasl.mechanisms": "PLAIN"}');
}

# 3. TLS: the broker's certificate is signed by the test CA, which only ssl.ca.location names.
sql("SELECT outbox.create_destination('tls', 'kafka', \$cfg\$"
      . config('sasl.password' => $password, topic => 'tls', 'ssl.ca.location' => undef) . "\$cfg\$)");
outage_then_fix('tls', 'tls', qr/certificate verify failed|SSL handshake failed/, 'TLS without the test CA',
    JSON::PP->new->encode({ 'ssl.ca.location' => $kafka->ca_file }));
# Who may name a file on the database server: not a mere destination manager.
sql(q{CREATE ROLE platform LOGIN; GRANT USAGE ON SCHEMA outbox TO platform;
      GRANT EXECUTE ON FUNCTION outbox.alter_destination(text, jsonb) TO platform});
my ($rc, $out, $err) = $node->psql('postgres',
    "SET ROLE platform; SELECT outbox.alter_destination('tls', '{\"ssl.ca.location\": \"/etc/ssl/certs/ca-certificates.crt\"}')",
    extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($rc, 0, 'a destination manager cannot set ssl.ca.location');
like($err, qr/42501.*ssl\.ca\.location/s, 'refused with SQLSTATE 42501, naming the setting') or diag($err);
like(sql(q{SELECT config->>'ssl.ca.location' FROM outbox.destinations WHERE name = 'tls'}), qr/\Q${\ $kafka->ca_file }\E/,
    'and the setting is unchanged');

$node->stop;
check_server_log($node);
$kafka->stop;
done_testing();
