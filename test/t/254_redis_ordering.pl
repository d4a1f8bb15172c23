# Per-key ordering for the redis kind (BrokerScenarios::ordering): 50 keys from 4 sessions
# while the server is stopped and started twice; for every key first arrivals in the stream
# (XRANGE order) follow id order. 16 s of production by default, 40 s with OUTBOX_TEST_FULL=1.
# outbox-tap: redis exclusive -- restarts the server twice
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::ordering('redis', seconds => ($ENV{OUTBOX_TEST_FULL} // '') eq '1' ? 40 : 16);
done_testing();
