# The library the webhook kind links (Makefile: outbox-driver and the unit tests); also the one
# src/brokers/curl_multi.cpp needs, the libcurl multi loop it shares with the sqs kind.
BROKER_LIBS += -lcurl
