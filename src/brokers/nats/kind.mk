# The library the nats kind links (Makefile: outbox-driver and the unit tests).
BROKER_LIBS += -lnats
