// The sqs kind's requests and answers in the AWS JSON 1.0 protocol (SendMessageBatch). Pure
// code (nlohmann/json): unit-tested without a server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/message.hpp"

namespace outbox {

// The most SQS takes in one message (body and attributes) and in one SendMessageBatch.
constexpr size_t kSqsMaxMessageBytes = 262144;
constexpr size_t kSqsMaxBatchEntries = 10;

struct SqsEntryOptions {
    std::string source;         // ce-source
    std::string type_fallback;  // ce-type of a message with no topic (nor ce_type header)
    bool fifo = false;
    std::string group;  // a keyless message's MessageGroupId on a FIFO queue; empty: refused
};

// One message as a SendMessageBatch entry: its JSON members after "Id" (MessageBody,
// MessageAttributes, MessageGroupId, MessageDeduplicationId), and the size SQS counts for it
// (body + every attribute's name, data type and value). `problem` is set instead when SQS
// cannot take the message, which no retry changes (too large, a character SQS refuses, a FIFO
// message without a group): the message is dead.
//
// Body: the payload (jsonb text as it is; payload_bytes in base64, with the attribute
// "body-encoding": "base64"). Attributes (all of DataType String; SQS allows 10): ce-id,
// ce-type, ce-source, ce-time, ce-specversion, content-type (the datacontenttype), then
// ce-traceparent and ce-tracestate when the message has them, body-encoding, and "headers":
// the producer's headers (but content-type and ce_type) as one JSON object. FIFO:
// MessageGroupId = the key (else `group`), MessageDeduplicationId = the event id.
struct SqsEntry {
    std::string members;  // ,"MessageBody":...  (starts with a comma)
    size_t sqs_bytes = 0;
    std::string problem;
};
SqsEntry EncodeSqsEntry(const Message &m, const SqsEntryOptions &options);

// The body of a SendMessageBatch request for `queue_url`: entries with Id "0", "1"... in order.
std::string SqsBatchRequest(const std::string &queue_url,
                            const std::vector<const std::string *> &members);

// libcurl adds "Expect: 100-continue" to a POST body above this (7.88 and later), and waits for
// the server's 100 before sending the body. A batch's body stays below it (SQS's 256 KiB, at most
// doubled by JSON escapes), so the requests need no "Expect:" line to keep it off.
constexpr size_t kCurlExpect100Threshold = 1024 * 1024;

// The header lines of every SendMessageBatch request (CURLOPT_HTTPHEADER): the content type and
// X-Amz-Target of the AWS JSON 1.0 protocol, and X-Amz-Security-Token with a session token.
// libcurl's CURLOPT_AWS_SIGV4 signs every line of that list, and signs a line without a value
// ("Expect:", which only removes a header) although it sends nothing for it: a server that
// verifies the signature then finds it wrong (SignatureDoesNotMatch). So every line has a value.
std::vector<std::string> SqsRequestHeaders(const std::string &session_token);

// What one entry's answer was.
struct SqsEntryResult {
    bool ok = false;
    bool sender_fault = false;
    std::string code, message;  // of a failed entry
};

// Parses SendMessageBatch's answer (HTTP 200) for `count` entries. False with *error when the
// body is not one, or leaves an entry unanswered.
bool ParseSqsBatchResponse(std::string_view body, size_t count, std::vector<SqsEntryResult> *out,
                           std::string *error);

// The error of a whole request (HTTP 4xx/5xx): the code without its namespace
// ("com.amazonaws.sqs#QueueDoesNotExist" -> "QueueDoesNotExist"), from the JSON body's
// "__type" or "code", or an XML body's <Code> (the query protocol's <ErrorResponse>), else from
// the x-amzn-query-error header ("AWS...NonExistentQueue;Sender"); and its message. Empty code
// when none has one.
std::pair<std::string, std::string> SqsRequestError(std::string_view body,
                                                    std::string_view query_error_header);

// Whether SQS takes `text` in a body or attribute value: valid UTF-8 of the XML characters
// #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF.
bool IsSqsText(std::string_view text);

}  // namespace outbox
