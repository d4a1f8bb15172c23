# The library the sqs kind links (Makefile: outbox-driver and the unit tests): libcurl, as the
# webhook kind (its AWS Signature Version 4 signs the requests; src/brokers/curl_multi.cpp is
# the multi loop both kinds share).
BROKER_LIBS += -lcurl
