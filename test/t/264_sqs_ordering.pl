# Per-key order for the sqs kind (BrokerScenarios::ordering) on a FIFO queue (MessageGroupId =
# key), while the server is restarted twice under production: for every key, first arrivals (by
# the queue's SequenceNumber) are in id order, and nothing is lost. 12 s of production by
# default, 40 s with OUTBOX_TEST_FULL.
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::ordering('sqs', $ENV{OUTBOX_TEST_FULL} ? () : (seconds => 12));
done_testing();
