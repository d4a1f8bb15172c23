# A write-back that fails stalls only its own destination: a trigger an operator put on
# outbox.dead_letters refuses one destination's dead letters, and another destination's
# messages keep being delivered; nothing of the failing one is lost, its last_error says why,
# and once the trigger is gone its dead letters are written.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $sink = webhook_sink();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('confined');
my $gone = $sink->url('/gone;status=400');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('refused', 'webhook', '{"url": "$gone"}');
    SELECT outbox.create_destination('flowing', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "flowing"}');
    CREATE FUNCTION public.no_dead_refused() RETURNS trigger LANGUAGE plpgsql AS \$\$
    BEGIN
        IF NEW.destination = 'refused' THEN
            RAISE EXCEPTION 'dead letters of refused are not accepted now' USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END \$\$;
    CREATE TRIGGER no_dead_refused BEFORE INSERT ON outbox.dead_letters
        FOR EACH ROW EXECUTE FUNCTION public.no_dead_refused();
    ALTER TABLE outbox.dead_letters ENABLE ALWAYS TRIGGER no_dead_refused;
    INSERT INTO outbox.messages (destination, payload) SELECT 'refused', jsonb_build_object('n', g) FROM generate_series(1, 20) g;
});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT last_error FROM outbox.stats() WHERE destination = 'refused'})
        =~ /write-back failed: dead letters of refused are not accepted now/ }, 60),
    "the failing destination's last_error says its write-back failed, and why");

my @produced = split /\n/, $node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload) SELECT 'flowing', jsonb_build_object('n', g) FROM generate_series(1, 2000) g
    RETURNING event_id});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'flowing'}) eq '0' }, 60),
    'the other destination is delivered meanwhile');
fault_summary('write_back_confined', produced => \@produced, received => kafka_event_ids($broker, 'flowing'));
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination = 'refused'}), '20',
    "the failing destination's messages are all still queued");
like(slurp_file($node->logfile), qr/writing back \d+ outcomes of destination "refused" failed: dead letters of refused are not accepted now/,
    'the log says which write-back failed');

$node->safe_psql('postgres', 'DROP TRIGGER no_dead_refused ON outbox.dead_letters');
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'refused'}) eq '20' }, 60),
    'once the trigger is gone, the 20 go to the dead letters');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages}), '0', 'nothing is left queued');
is($node->safe_psql('postgres', q{SELECT string_agg(balance::text, ',') FROM outbox.conservation()}), '0,0',
    'every message is accounted for');

$node->stop;
check_server_log($node);
$broker->stop;
$sink->stop;
done_testing();
