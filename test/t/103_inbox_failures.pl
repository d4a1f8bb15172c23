# A handler that raises (issue 23): with "on_error": "skip" the record goes to
# outbox.inbox_dead_letters with the error and SQLSTATE and the other records flow; with
# "block" only its partition stops there; outbox.requeue_inbox() applies it once after the
# handler is fixed, and a blocked partition then goes on in order.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl("create $_ 2") for qw(skipt blockt);
my $node = outbox_node('inbox_failures');
$node->safe_psql('postgres', qq{
    CREATE TABLE applied (sub text, n int, "partition" int, "offset" bigint);
    CREATE TABLE poison (n int PRIMARY KEY);
    INSERT INTO poison VALUES (50);
    CREATE FUNCTION public.apply(m outbox.inbox_message) RETURNS void LANGUAGE plpgsql AS \$\$
    BEGIN
        IF EXISTS (SELECT FROM public.poison p WHERE p.n = (m.payload->>'n')::int) THEN
            RAISE EXCEPTION 'refused %', m.payload->>'n' USING ERRCODE = 'XY123';
        END IF;
        INSERT INTO public.applied VALUES (m.subscription, (m.payload->>'n')::int, m.partition, m."offset");
    END \$\$;
    SELECT outbox.create_destination('skipd', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "skipt", "ordering": "key"}');
    SELECT outbox.create_destination('blockd', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "blockt", "ordering": "key"}');
    SELECT outbox.create_subscription('skip_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["skipt"], "batch_size": 20}', 'public.apply(outbox.inbox_message)');
    SELECT outbox.create_subscription('block_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["blockt"], "on_error": "block", "batch_size": 20}',
        'public.apply(outbox.inbox_message)');
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT d, 'k' || (g % 10), jsonb_build_object('n', g)
      FROM generate_series(1, 200) g, unnest(ARRAY['skipd', 'blockd']) d;
});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'the 400 messages reached the broker');
my %end;
for my $topic (qw(skipt blockt)) {
    for my $p (0, 1) {
        my $out = `kcat -Q -b $bootstrap -t $topic:$p:-1 2>/dev/null`;
        $end{$topic}{$p} = $out =~ /\[\d+\]\s+offset\s+(-?\d+)/ ? $1 : -1;
    }
}
my $stored = sub {
    my ($sub, $p) = @_;
    return $node->safe_psql('postgres', qq{
        SELECT "offset" FROM outbox.inbox_offsets WHERE subscription = '$sub' AND "partition" = $p});
};

# skip: everything but n = 50 applied, n = 50 dead-lettered with the error and SQLSTATE.
ok(wait_until(sub { ($stored->('skip_in', 0) // -2) == $end{skipt}{0} && ($stored->('skip_in', 1) // -2) == $end{skipt}{1} }, 60),
    'skip: both partitions consumed to the end');
is($node->safe_psql('postgres', q{SELECT count(*), count(DISTINCT n) FROM applied WHERE sub = 'skip_in'}), '199|199',
    'skip: the other 199 records applied once each');
is($node->safe_psql('postgres', q{
    SELECT payload->>'n', last_sqlstate, last_error, blocking, attempts, event_id IS NOT NULL
      FROM outbox.inbox_dead_letters WHERE subscription = 'skip_in'}),
    '50|XY123|refused 50|f|1|t', 'skip: n = 50 in outbox.inbox_dead_letters with its SQLSTATE and error');
is($node->safe_psql('postgres', q{SELECT sum(dead_lettered), sum(consumed), bool_or(blocked) FROM outbox.subscriptions() WHERE subscription = 'skip_in'}),
    '1|199|f', 'skip: outbox.subscriptions() counts it, nothing blocked');
like($node->safe_psql('postgres', q{SELECT string_agg(last_error, ',') FROM outbox.subscriptions() WHERE subscription = 'skip_in'}),
    qr/XY123: refused 50/, 'skip: last_error names the offset, SQLSTATE and message');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.inbox i JOIN outbox.inbox_dead_letters d USING (event_id)}),
    '0', 'no dedup row for the dead-lettered record: its effect was rolled back with it');

# block: the partition of n = 50 stops at it; the other partition goes to the end.
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.inbox_dead_letters WHERE subscription = 'block_in'}) eq '1' }, 60),
    'block: n = 50 dead-lettered');
my ($bp, $boff) = split /\|/, $node->safe_psql('postgres', q{
    SELECT "partition", "offset" FROM outbox.inbox_dead_letters WHERE subscription = 'block_in' AND blocking});
ok(defined $boff, "block: the dead letter is blocking (partition $bp, offset $boff)");
my $other = 1 - $bp;
ok(wait_until(sub { ($stored->('block_in', $other) // -2) == $end{blockt}{$other} }, 60),
    'block: the other partition is consumed to its end');
sleep 1;   # the blocked partition has its chance to move (the inbox worker shows no count of its turns)
is($stored->('block_in', $bp), $boff + 1, 'block: the blocked partition stored offset is just past the record');
cmp_ok($end{blockt}{$bp}, '>', $boff + 1, 'block: and records after it wait in the broker');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM applied WHERE sub = 'block_in' AND "partition" = $bp AND "offset" > $boff}),
    '0', 'block: none of them applied');
is($node->safe_psql('postgres', qq{SELECT blocked FROM outbox.subscriptions() WHERE subscription = 'block_in' AND "partition" = $bp}),
    't', 'block: outbox.subscriptions() says the partition is blocked');

# Requeue while the handler still refuses: it fails again, counted, and stays.
is($node->safe_psql('postgres', q{SELECT outbox.requeue_inbox('skip_in')}), '1', 'requeue_inbox marks the one dead letter');
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT attempts FROM outbox.inbox_dead_letters WHERE subscription = 'skip_in'}) eq '2' }, 30),
    'still refused: attempts 2, and it stays a dead letter');
# Fixed: requeue applies each once; the blocked partition goes on, in order.
$node->safe_psql('postgres', 'DELETE FROM poison');
is($node->safe_psql('postgres', q{SELECT outbox.requeue_inbox(array_agg(id)) FROM outbox.inbox_dead_letters}), '2',
    'requeue_inbox by ids');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.inbox_dead_letters') eq '0' }, 30),
    'both applied: no dead letters left');
ok(wait_until(sub { ($stored->('block_in', $bp) // -2) == $end{blockt}{$bp} }, 60),
    'block: the partition went on to its end');
is($node->safe_psql('postgres', q{SELECT sub, count(*), count(DISTINCT n) FROM applied GROUP BY sub ORDER BY sub}),
    "block_in|200|200\nskip_in|200|200", 'every record applied exactly once in both');
is($node->safe_psql('postgres', qq{
    SELECT count(*) FROM (SELECT "offset", lag("offset") OVER (ORDER BY ctid) AS prev FROM applied
                           WHERE sub = 'block_in' AND "partition" = $bp) s WHERE "offset" < prev}),
    '0', 'block: the partition was applied in offset order, the requeued record first');
is($node->safe_psql('postgres', q{SELECT outbox.requeue_inbox('skip_in')}), '0', 'nothing left to requeue');

# Bad input: exact errors, nothing changed.
my ($rc, $out, $err) = $node->psql('postgres', qq{\\set VERBOSITY verbose\nSELECT outbox.requeue_inbox('nope')});
like($err, qr/ERROR:  42704: subscription "nope" does not exist/, 'requeue_inbox of an unknown subscription: 42704');
($rc, $out, $err) = $node->psql('postgres', qq{\\set VERBOSITY verbose\nSELECT outbox.requeue_inbox(NULL::bigint[])});
like($err, qr/ERROR:  22004: outbox.requeue_inbox needs an array of dead letter ids/, 'requeue_inbox(NULL): 22004');
is($node->safe_psql('postgres', q{SELECT count(*) FROM applied}), '400', 'and nothing else was applied');

check_server_log($node);
done_testing();
