# Outage for the amqp kind (BrokerScenarios::outage): the server is stopped for 20 s while
# producers commit 50 messages/s; nothing is dead-lettered, no attempt is spent, everything
# arrives once it is back.
# outbox-tap: rabbitmq exclusive -- stops the server for 20 s
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::outage('rabbitmq');
done_testing();
