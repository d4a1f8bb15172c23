# An SQS outage for the sqs kind (BrokerScenarios::outage): the server stopped mid-drain while
# producers commit; no attempt spent, nothing dead-lettered, everything arrives once it is back.
# Down 6 s by default, 30 s with OUTBOX_TEST_FULL.
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::outage('sqs', $ENV{OUTBOX_TEST_FULL} ? (down => 30, seconds => 50)
    : (down => 6, seconds => 12));
done_testing();
