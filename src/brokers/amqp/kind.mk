# The library the amqp kind links (Makefile: outbox-driver and the unit tests).
BROKER_LIBS += -lrabbitmq
