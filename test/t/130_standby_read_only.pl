# On a hot standby the read-only functions answer as on the primary, with the figures as
# replicated and a NOTICE saying that the server is a replica and no worker runs there (issue
# 43). Before, outbox.stats() and outbox.conservation() failed there ("cannot acquire lock mode
# ShareLock on database objects while recovery is in progress": the first call after a start
# takes the queue counts under a SHARE lock), so monitoring that polls every member got an ERROR
# from each standby, and each standby logged it.
#
# A primary with a streaming standby: a paused Kafka destination with messages queued, some
# scheduled for later; a paused ordering = key webhook destination; a webhook destination whose
# receiver turns messages down (dead letters); a subscription that consumed a few records. Once
# the standby has replayed everything:
#   - outbox.stats(): every gauge equals the primary's; the counters since server start are 0
#     (this server's workers delivered nothing);
#   - outbox.conservation(): queued as on the primary, balance 0;
#   - outbox.workers(): no row;
#   - outbox.subscriptions(): the offsets and counts as on the primary;
#   - outbox.blocked_keys(): answers;
#   - each of the four sends the NOTICE once; the primary sends none; the standby's log stays
#     free of errors;
#   - the postgres_exporter queries of docker/postgres_exporter/queries.yaml run on both: on
#     the primary every metric column has a value; on the standby they return no rows (the
#     series come from the primary, so that alerts and sums see each destination once).
use strict;
use warnings;
use OutboxPatroni;
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $sink = webhook_sink();
my $primary = outbox_node('primary', init => { allows_streaming => 1 },
    conf => "log_statement = none\nwal_receiver_status_interval = '1s'");
$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;

my $url = $sink->url('/refuse;status=422');
$primary->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "orders"}');
    SELECT outbox.pause('orders');
    INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'orders', 'k' || g, jsonb_build_object('n', g) FROM generate_series(1, 40) g;
    INSERT INTO outbox.messages (destination, key, payload, available_at)
        SELECT 'orders', 's' || g, '{}', now() + interval '1 hour' FROM generate_series(1, 5) g;
    SELECT outbox.create_destination('keyed', 'webhook', '{"url": "http://127.0.0.1:1/", "ordering": "key"}');
    SELECT outbox.pause('keyed');
    INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'keyed', 'k' || (g % 3), jsonb_build_object('n', g) FROM generate_series(1, 12) g;
    SELECT outbox.create_destination('refused', 'webhook', '{"url": "$url"}');
    INSERT INTO outbox.messages (destination, payload) SELECT 'refused', '{}' FROM generate_series(1, 3);
    SELECT outbox.create_destination('to_inbox', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "inbound"}');
    INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'to_inbox', 'i' || g, jsonb_build_object('n', g) FROM generate_series(1, 4) g;
    CREATE TABLE applied (event_id uuid);
    CREATE FUNCTION apply(m outbox.inbox_message) RETURNS void LANGUAGE sql
        AS 'INSERT INTO public.applied VALUES (m.event_id)';
    SELECT outbox.create_subscription('inbound', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["inbound"]}', 'apply(outbox.inbox_message)');
});
ok(wait_until(sub { $primary->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq '3' }, 60),
    'primary: the refused messages are dead letters');
ok(wait_until(sub { $primary->safe_psql('postgres', 'SELECT count(*) FROM applied') eq '4' }, 60),
    'primary: the subscription applied the 4 records');
ok(wait_until(sub { $primary->safe_psql('postgres',
    q{SELECT coalesce(sum(consumed), 0) FROM outbox.subscriptions()}) eq '4' }, 60),
    'primary: outbox.subscriptions() counts them');
$primary->wait_for_catchup($standby);

# Runs $sql on $node; returns (rows, the NOTICE lines, exit code, stderr).
sub query {
    my ($node, $sql) = @_;
    my ($out, $err) = ('', '');
    my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
        extra_params => ['-v', 'ON_ERROR_STOP=1']);
    my @notices = $err =~ /^(?:psql:[^\n]*?)?NOTICE:  (outbox: this server is a replica[^\n]*)/mg;
    return ($out, \@notices, $rc, $err);
}

my $gauges = q{
    SELECT destination, kind, paused, pending, in_flight, retrying, dead, scheduled, blocked_keys,
           waiting, oldest_pending_age IS NOT NULL, max_pending, tls_verify
      FROM outbox.stats() ORDER BY destination};
my ($p_gauges, $p_notes) = query($primary, $gauges);
my ($s_gauges, $s_notes, $rc, $err) = query($standby, $gauges);
is($rc, 0, 'standby: outbox.stats() answers') or diag($err);
is($s_gauges, $p_gauges, 'standby: every gauge of outbox.stats() equals the primary\'s');
like($s_gauges, qr/^orders\|kafka\|t\|40\|0\|0\|0\|5\|/m, 'standby: 40 pending and 5 scheduled for orders');
like($s_gauges, qr/^refused\|webhook\|f\|0\|0\|0\|3\|/m, 'standby: the 3 dead letters of refused');
is(scalar(@$s_notes), 1, 'standby: outbox.stats() sends the NOTICE once') or diag($err);
is(scalar(@$p_notes), 0, 'primary: outbox.stats() sends none');
my ($counters) = query($standby, q{
    SELECT sum(delivered_total + failed_total + dead_lettered_total + expired_total
               + deferred_total + refused_total + superseded_total) FROM outbox.stats()});
is($counters, '0', 'standby: its counters since server start are 0 (its workers delivered nothing)');

my $conservation = q{SELECT destination, queued FROM outbox.conservation() ORDER BY destination};
my ($p_cons) = query($primary, $conservation);
my ($s_cons, $c_notes, $c_rc, $c_err) = query($standby, $conservation);
is($c_rc, 0, 'standby: outbox.conservation() answers') or diag($c_err);
is($s_cons, $p_cons, 'standby: queued as on the primary');
my ($balance) = query($standby, q{SELECT count(*) FILTER (WHERE balance <> 0 OR balance IS NULL) || '/' || count(*)
    FROM outbox.conservation()});
like($balance, qr{^0/[1-9]}, 'standby: every destination balances');
is(scalar(@$c_notes), 1, 'standby: outbox.conservation() sends the NOTICE once');

my ($s_workers, $w_notes, $w_rc, $w_err) = query($standby, 'SELECT count(*) FROM outbox.workers()');
is($w_rc, 0, 'standby: outbox.workers() answers') or diag($w_err);
is($s_workers, '0', 'standby: outbox.workers() lists none');
is(scalar(@$w_notes), 1, 'standby: outbox.workers() sends the NOTICE once');
cmp_ok((query($primary, 'SELECT count(*) FROM outbox.workers()'))[0], '>=', 1, 'primary: its worker is listed');
is(scalar(@{ (query($primary, 'SELECT count(*) FROM outbox.workers()'))[1] }), 0,
    'primary: outbox.workers() sends no NOTICE');

my $subscriptions = q{
    SELECT subscription, kind, paused, topic, "partition", stored_offset, consumed, duplicates,
           dead_lettered, blocked
      FROM outbox.subscriptions() ORDER BY 1, 4, 5};
my ($p_subs, $ps_notes) = query($primary, $subscriptions);
my ($s_subs, $s_subs_notes, $s_rc, $s_err) = query($standby, $subscriptions);
is($s_rc, 0, 'standby: outbox.subscriptions() answers') or diag($s_err);
is($s_subs, $p_subs, 'standby: the subscription\'s offsets and counts as on the primary');
is(scalar(@$s_subs_notes), 1, 'standby: outbox.subscriptions() sends the NOTICE once');
is(scalar(@$ps_notes), 0, 'primary: outbox.subscriptions() sends none');

my ($p_blocked) = query($primary, q{SELECT count(*) FROM outbox.blocked_keys('keyed')});
my ($s_blocked, undef, $b_rc, $b_err) = query($standby, q{SELECT count(*) FROM outbox.blocked_keys('keyed')});
is($b_rc, 0, 'standby: outbox.blocked_keys() answers') or diag($b_err);
is($s_blocked, $p_blocked, 'standby: outbox.blocked_keys() as on the primary');

# The exporter's queries, as postgres_exporter runs them.
for my $check (OutboxPatroni::exporter_checks()) {
    my ($name, $sql) = @$check;
    my ($p_out, undef, $p_rc, $p_err) = query($primary, $sql);
    is($p_rc, 0, "primary: exporter query $name runs") or diag($p_err);
    like($p_out, qr{^[1-9]\d*/0$}, "primary: exporter query $name: rows, no metric column NULL ($p_out)");
    my ($s_out, undef, $s_rc, $s_err) = query($standby, $sql);
    is($s_rc, 0, "standby: exporter query $name runs") or diag($s_err);
    is($s_out, '0/0', "standby: exporter query $name returns no rows");
}
cmp_ok((query($primary, q{SELECT count(*) FROM outbox.stats()}))[0], '==', 4, 'primary: four destinations');

# Nothing above was an error on the standby, and it logged nothing of the kind.
$standby->stop;
unlike(slurp_file($standby->logfile), qr/ERROR|cannot acquire lock/, 'standby: no ERROR in its log');
$primary->stop;
check_server_log($primary);
check_server_log($standby);
$sink->stop;
$broker->stop;
done_testing();
