# The library the kafka kind links (Makefile: outbox-driver and the unit tests).
BROKER_LIBS += -lrdkafka
