# Outage: the broker goes down for 20 s while messages keep flowing. Nothing is dead-lettered,
# no attempt is spent, and everything arrives once the broker is back.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
# A short lease makes librdkafka give up on queued messages (message.timeout.ms is kept below
# the lease) well within the outage, so the deferral path is exercised.
my $node = outbox_node('outage', conf => "outbox.lease_timeout = '8s'\noutbox.max_attempts = 2");
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('flow', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "flow"}');
    CREATE SEQUENCE n_seq;
});

my $script = PostgreSQL::Test::Utils::tempdir() . '/produce.sql';
PostgreSQL::Test::Utils::append_to_file($script,
    "INSERT INTO outbox.messages (destination, key, payload) "
      . "SELECT 'flow', 'k' || n, jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') n) s;\n");
# 50 messages/s for 35 s, in the background.
my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(['pgbench', '-n', '-c', '2', '-R', '50', '-T', '35', '-f', $script,
        '-h', $node->host, '-p', $node->port, 'postgres'], '>', \$out, '2>', \$err);

ok(wait_until(sub { stats_row($node, 'flow')->{delivered_total} >= 50 }, 30), 'messages flow');
$broker->down;
my $down_at = time;
diag('broker down');
# While it is down the queue grows and stats() says why.
ok(wait_until(sub {
    my $s = stats_row($node, 'flow');
    $s->{pending} > 100 && ($s->{last_error} // '') =~ /unreachable/ }, 20),
    'during the outage messages wait as pending, last_error says the destination is unreachable')
  or diag(explain(stats_row($node, 'flow')));
# The outage lasts 20 s, more than twice the lease: its length is the scenario, not a wait.
sleep(20 - (time - $down_at)) if time - $down_at < 20;
$broker->up;
diag('broker up');
ok($pgbench->finish, 'the producers ran throughout') or diag($err);
my $produced = $node->safe_psql('postgres', 'SELECT last_value FROM n_seq');
diag("produced $produced messages");

ok(wait_until(sub {
    $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 90),
    'everything is delivered once the broker is back');
my $s = stats_row($node, 'flow');
is($s->{dead}, 0, 'nothing dead-lettered (max_attempts is 2)')
  or diag($node->safe_psql('postgres',
    'SELECT reason, last_error, count(*) FROM outbox.dead_letters GROUP BY 1, 2'));
is($s->{failed_total}, 0, 'no attempt was spent on the outage');
cmp_ok($s->{deferred_total}, '>', 0, 'messages were deferred: ' . $s->{deferred_total});

my $got = $broker->consume('flow');
my %seen;
$seen{ $_->{key} }++ for @$got;
my @missing = grep { !$seen{"k$_"} } 1 .. $produced;
is(scalar(@missing), 0, "all $produced messages arrived")
  or diag('missing: ' . join(' ', @missing[0 .. ($#missing < 20 ? $#missing : 20)]));
diag(scalar(@$got) - scalar(keys %seen) . ' duplicates');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
