# outbox.broker_allowed_networks for the amqp kind (BrokerScenarios::networks): a broker
# address a role other than a superuser configured is checked when the driver connects.
# outbox-tap: rabbitmq shared
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::networks('rabbitmq');
done_testing();
