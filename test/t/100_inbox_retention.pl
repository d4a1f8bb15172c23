# The inbox's dedup rows (outbox.inbox) are swept by the workers once they are older than
# outbox.inbox_retention, in bounded batches, oldest first; younger rows stay, and an event whose
# row stays is still a duplicate for outbox.inbox_accept. With outbox.inbox_retention = 0 nothing
# is swept. Dedup rows survive a server crash (they commit with the caller's transaction).
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('inbox_retention', conf => "outbox.inbox_retention = '1h'");
my $count = sub {
    my ($where) = @_;
    return $node->safe_psql('postgres', "SELECT count(*) FROM outbox.inbox WHERE $where");
};

# 12,000 rows received two hours ago (more than two sweep batches), and 100 accepted now.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.inbox (subscription, event_id, received_at)
    SELECT 'old', gen_random_uuid(), now() - interval '2 hours' - g * interval '1 ms'
      FROM generate_series(1, 12000) g;
    SELECT outbox.inbox_accept('new', gen_random_uuid()) FROM generate_series(1, 100);
    INSERT INTO outbox.inbox (subscription, event_id, received_at)
    VALUES ('new', '0190a8c0-0000-7000-8000-00000000abcd', now() - interval '50 minutes');
});
is($count->("subscription = 'new'"), '101', 'the young rows are in');

ok(wait_until(sub { $count->("subscription = 'old'") eq '0' }, 60, 'old dedup rows swept'),
    'every row older than outbox.inbox_retention is swept');
is($count->("subscription = 'new'"), '101', 'rows younger than the retention stay');
is($node->safe_psql('postgres', q{SELECT outbox.inbox_accept('new', '0190a8c0-0000-7000-8000-00000000abcd')}),
    'f', 'an event whose row stays is still a duplicate');
my $log = slurp_file($node->logfile);
unlike($log, qr/sweeping outbox.inbox failed/, 'no sweep failed');

# (Each sweep deletes at most 5,000 rows, src/pg/inbox.cpp: 12,000 took several polls.)
is($node->safe_psql('postgres', 'SELECT count(*) > 0 FROM outbox.workers()'), 't', 'the worker runs on');

# outbox.inbox_retention = 0: kept for ever.
$node->append_conf('postgresql.conf', "outbox.inbox_retention = 0\n");
$node->reload;
ok(wait_until(sub { $node->safe_psql('postgres', 'SHOW outbox.inbox_retention') eq '0' }, 30),
    'the reload is seen');
$node->safe_psql('postgres', q{
    INSERT INTO outbox.inbox (subscription, event_id, received_at)
    SELECT 'ancient', gen_random_uuid(), now() - interval '400 days' FROM generate_series(1, 10)});
# Many polls (200 ms each) of the worker, which sweeps the inbox on its polls and has seen the
# reload by now.
ok(wait_for_cycles($node, 10), 'the worker has polled ten times since');
is($count->("subscription = 'ancient'"), '10', 'with outbox.inbox_retention = 0 nothing is swept');

# Dedup rows of committed transactions survive a crash (immediate stop).
$node->stop('immediate');
$node->start;
is($count->("subscription = 'new'"), '101', 'the dedup rows survive an immediate stop');
is($node->safe_psql('postgres', q{SELECT outbox.inbox_accept('new', '0190a8c0-0000-7000-8000-00000000abcd')}),
    'f', 'and still make a redelivered event a duplicate');

check_server_log($node);
$node->stop;
done_testing();
