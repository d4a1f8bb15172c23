# The library the webhook kind links (Makefile: outbox-driver and the unit tests).
BROKER_LIBS += -lcurl
