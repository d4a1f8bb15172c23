# A database listed in outbox.databases that did not exist when the launcher last looked is
# served as soon as CREATE EXTENSION outbox commits there: the commit wakes the launcher. Before,
# the launcher found it only at its next recheck, up to 10 s later (issue 16).
#
# The bound is 3 s: after the wake-up the launcher registers the worker, the postmaster forks
# it and it connects, which takes well under a second even on a loaded machine; a missed
# wake-up costs the rest of the launcher's 10 s recheck, which a reload right before the CREATE
# DATABASE has just restarted. The same commit wakes the workers already running for the
# database (waiting for the extension), which would otherwise find it at their next poll
# (poll_interval is 5 s here).
# outbox-tap: alone -- asserts wake-up latencies (under 3 s and 2 s)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('late', conf => "outbox.databases = 'postgres, late'\noutbox.poll_interval = '5s'");
ok(wait_until(sub { slurp_file($node->logfile) =~ /database "late" in outbox.databases does not exist/ }, 30),
    'the launcher has looked for database late and not found it');

# The launcher looks at the list again now (and does not find late), then sleeps its 10 s.
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
# (The launcher shows no count of its passes to wait on; its pass after a reload takes a few
# milliseconds.)
sleep 0.5;
$node->safe_psql('postgres', 'CREATE DATABASE late');
# Serving: past 'starting' (a worker the launcher has just started for the new database, before
# it looked for the extension: a loaded machine caught one there) and not waiting for it.
my $served = q{SELECT count(*) FROM outbox.workers() WHERE database = 'late' AND state NOT IN ('starting', 'no extension')};
is($node->safe_psql('postgres', $served), '0', 'nothing serves late before CREATE EXTENSION');

my $t0 = time;
$node->safe_psql('late', 'CREATE EXTENSION outbox');
ok(wait_until(sub { $node->safe_psql('postgres', $served) eq '1' }, 15),
    'a worker serves late after CREATE EXTENSION');
my $took = time - $t0;
diag(sprintf('a worker served the new database %.2f s after CREATE EXTENSION', $took));
cmp_ok($took, '<', 3, 'within 3 s, not at the launcher\'s 10 s recheck');

$node->safe_psql('late', qq{
    SELECT outbox.create_destination('d', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "late"}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('d', 'late-1', '{}');
});
ok(wait_until(sub { grep { $_->{key} eq 'late-1' } @{ $broker->consume('late') } }, 30),
    'and it delivers');

# A CREATE EXTENSION that rolls back wakes nobody and changes nothing.
$node->safe_psql('postgres', 'CREATE DATABASE later');
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.databases = 'postgres, late, later'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM outbox.workers() WHERE database = 'later'") eq '1' }, 15),
    'a database that exists is served once listed (a reload)');
$node->safe_psql('later', 'BEGIN; CREATE EXTENSION outbox; ROLLBACK;');
# A state that must not change: a second to change it in (with poll_interval 5 s here, waiting
# for the worker's turns would take longer).
sleep 1;
is($node->safe_psql('postgres', "SELECT state FROM outbox.workers() WHERE database = 'later'"), 'no extension',
    'after a CREATE EXTENSION that rolled back its worker still waits for the extension');
$t0 = time;
$node->safe_psql('later', 'CREATE EXTENSION outbox');
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT state FROM outbox.workers() WHERE database = 'later'") ne 'no extension' }, 15),
    'the running worker takes the extension up after CREATE EXTENSION');
$took = time - $t0;
diag(sprintf('the running worker took %.2f s', $took));
cmp_ok($took, '<', 2, 'at once, not at its next poll');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
