# The library the mqtt kind links (Makefile: outbox-driver and the unit tests).
BROKER_LIBS += -lmosquitto
