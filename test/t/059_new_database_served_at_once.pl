# A database listed in outbox.databases that did not exist when the launcher last looked is
# served as soon as the statement that makes it exist with the extension commits, whichever
# statement that is (issue 43):
#   - CREATE DATABASE, then CREATE EXTENSION outbox in it (the commit of CREATE EXTENSION wakes
#     the launcher; test/t/056 has the details of that path);
#   - CREATE DATABASE ... TEMPLATE a database that has the extension (no CREATE EXTENSION runs);
#   - ALTER DATABASE ... RENAME TO a listed name, of a database that has the extension.
# Each is timed from the statement's return to the first worker of the database that has found
# the extension (outbox.workers(): state other than "no extension"). Before, the last two were found at the launcher's next recheck, up to 10 s
# later: the launcher was woken only before their commit (when the hook let the template's or
# the renamed database's workers back), looked, found nothing and slept its 10 s.
#
# The bound is 3 s, as in test/t/056: the wake-up makes the launcher register the worker, the
# postmaster fork it and it connect and look at the extension, which takes 0.1-0.3 s and up to
# 1.5 s on a loaded machine; a missed wake-up costs the rest of the launcher's 10 s recheck,
# which every case here has just restarted.
# outbox-tap: alone -- asserts wake-up latencies (under 3 s)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('late', conf => join("\n",
    "outbox.databases = 'postgres, late_a, late_b, late_c'", "outbox.poll_interval = '5s'"));
ok(wait_until(sub { slurp_file($node->logfile) =~ /database "late_c" in outbox.databases does not exist/ }, 30),
    'the launcher has looked for the listed databases and not found them');

# A worker of the database that has found the extension.
my $served = q{SELECT count(*) FROM outbox.workers() WHERE database = '%s' AND state <> 'no extension'};

# Seconds from $t0 until database $db is served (undef: not within 15 s).
sub served_after {
    my ($db, $t0) = @_;
    my $ok = wait_until(sub { $node->safe_psql('postgres', sprintf($served, $db)) eq '1' }, 15,
        "a worker serving $db");
    return $ok ? time - $t0 : undef;
}

# Checks that the database's worker delivers.
sub delivers {
    my ($db) = @_;
    $node->safe_psql($db, qq{
        SELECT outbox.create_destination('d', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "$db"}');
        INSERT INTO outbox.messages (destination, key, payload) VALUES ('d', '$db-1', '{}');
    });
    ok(wait_until(sub { grep { $_->{key} eq "$db-1" } @{ $broker->consume($db) } }, 30),
        "$db: its worker delivers");
}

my %took;

# 1. CREATE DATABASE, then CREATE EXTENSION.
$node->safe_psql('postgres', 'CREATE DATABASE late_a');
sleep 0.5;
is($node->safe_psql('postgres', sprintf($served, 'late_a')), '0',
    'late_a: not served before CREATE EXTENSION');
my $t0 = time;
$node->safe_psql('late_a', 'CREATE EXTENSION outbox');
$took{create_extension} = served_after('late_a', $t0);
ok(defined $took{create_extension}, 'late_a: served after CREATE EXTENSION');
delivers('late_a');

# 2. CREATE DATABASE ... TEMPLATE a database with the extension. The template is not listed;
# its CREATE EXTENSION wakes the launcher, which looks once more and sleeps again.
$node->safe_psql('postgres', 'CREATE DATABASE tmpl');
$node->safe_psql('tmpl', 'CREATE EXTENSION outbox');
sleep 0.5;
$t0 = time;
$node->safe_psql('postgres', 'CREATE DATABASE late_b TEMPLATE tmpl');
$took{create_database_template} = served_after('late_b', $t0);
ok(defined $took{create_database_template}, 'late_b: served after CREATE DATABASE ... TEMPLATE');
delivers('late_b');

# 3. ALTER DATABASE ... RENAME TO a listed name.
$node->safe_psql('postgres', 'CREATE DATABASE other TEMPLATE tmpl');
sleep 0.5;
$t0 = time;
$node->safe_psql('postgres', 'ALTER DATABASE other RENAME TO late_c');
$took{rename} = served_after('late_c', $t0);
ok(defined $took{rename}, 'late_c: served after ALTER DATABASE ... RENAME TO');
delivers('late_c');

for my $case (qw(create_extension create_database_template rename)) {
    my $s = $took{$case};
    diag(sprintf('%s: the first worker ran %s after the statement returned', $case,
        defined $s ? sprintf('%.2f s', $s) : 'not within 15 s'));
    cmp_ok($s // 99, '<', 3, "$case: the first worker within 3 s, not at the launcher's 10 s recheck");
}

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
