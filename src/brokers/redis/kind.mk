# The library the redis kind links (Makefile: outbox-driver and the unit tests): hiredis for the
# protocol only (encoding commands, parsing replies); the socket and TLS are the driver's own.
BROKER_LIBS += -lhiredis -lssl
