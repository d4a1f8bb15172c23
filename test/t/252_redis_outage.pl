# Outage for the redis kind (BrokerScenarios::outage): the server is stopped while producers
# commit 50 messages/s (8 s of 16 by default, 30 s of 45 with OUTBOX_TEST_FULL=1); nothing is
# dead-lettered, no attempt is spent, everything arrives once it is back.
# outbox-tap: redis exclusive -- stops the server
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

my $full = ($ENV{OUTBOX_TEST_FULL} // '') eq '1';
BrokerScenarios::outage('redis', down => $full ? 30 : 8, seconds => $full ? 45 : 16);
done_testing();
