// The producer's trace context, captured at INSERT (see src/pg/trace_capture.cpp).
//
// Like every header under outbox/pg/, include it after the standard and pure outbox headers.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace outbox::pg {

// The headers to store for a new message with `headers` (has_headers: not NULL, already checked
// by the INSERT check): its own valid trace context kept, else outbox.traceparent or the
// statement's SQLCommenter comment added; a malformed one left out with a WARNING. 0 when the
// headers stay as they are. May ereport.
Datum CaptureTraceContext(Datum headers, bool has_headers);

}  // namespace outbox::pg
