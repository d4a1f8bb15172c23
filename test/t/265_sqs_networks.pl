# outbox.broker_allowed_networks for the sqs kind (BrokerScenarios::networks): every address
# libcurl connects to is checked as its socket is opened; a refused one defers the messages
# without an attempt and says why in the server log only.
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::networks('sqs');
done_testing();
