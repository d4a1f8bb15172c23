// Open options and the check frames' bodies (see include/outbox/ipc/protocol.hpp).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/ipc/protocol.hpp"
#include "outbox/ipc/wire.hpp"

namespace outbox::protocol {

// A field added to a context without a line in its visitor would silently not reach the
// helper: these sizes change with any new field, and then this is the place to look.
// (libstdc++ on 64-bit Linux, the only platform the extension is built for.)
static_assert(sizeof(DriverContext) == 248,
              "DriverContext changed: add the new field to VisitDriverContext "
              "(include/outbox/ipc/protocol.hpp), then update this size");
static_assert(sizeof(ConsumerContext) == 128,
              "ConsumerContext changed: add the new field to VisitConsumerContext "
              "(include/outbox/ipc/protocol.hpp), then update this size");

namespace wire {

namespace {

enum class Tag : uint8_t { String = 1, Bool = 2, Int64 = 4, Size = 5 };

struct OptionWriter {
    std::string *out;
    void Head(const char *name, Tag tag) {
        PutString(out, name);
        PutU8(out, static_cast<uint8_t>(tag));
    }
    void operator()(const char *name, const std::string &v) {
        Head(name, Tag::String);
        PutString(out, v);
    }
    void operator()(const char *name, bool v) {
        Head(name, Tag::Bool);
        PutU8(out, v ? 1 : 0);
    }
    void operator()(const char *name, int64_t v) {
        Head(name, Tag::Int64);
        PutI64(out, v);
    }
    void operator()(const char *name, size_t v) {
        Head(name, Tag::Size);
        PutU64(out, v);
    }
};

struct OptionReader {
    Reader &r;
    std::string *field;  // the first field that did not match, for the error
    bool Head(const char *name, Tag tag) {
        std::string_view got = r.View();
        uint8_t got_tag = r.U8();
        if (r.ok() && (got != name || got_tag != static_cast<uint8_t>(tag))) {
            *field = name;
            r.Fail("the options do not match this build (expected another field)");
        }
        return r.ok();
    }
    void operator()(const char *name, std::string &v) {
        if (Head(name, Tag::String))
            v = r.String();
    }
    void operator()(const char *name, bool &v) {
        if (Head(name, Tag::Bool))
            v = r.Bool();
    }
    void operator()(const char *name, int64_t &v) {
        if (Head(name, Tag::Int64))
            v = r.I64();
    }
    void operator()(const char *name, size_t &v) {
        if (Head(name, Tag::Size))
            v = static_cast<size_t>(r.U64());
    }
};

template <typename Context, typename Visit>
std::string EncodeWith(const std::string &config, const Context &context, Visit visit) {
    std::string out;
    OptionWriter writer{&out};
    writer("config", config);
    visit(context, writer);
    return out;
}

template <typename Context, typename Visit>
bool DecodeWith(std::string_view bytes, std::string *config, Context *context, std::string *error,
                Visit visit) {
    Reader r(bytes);
    std::string field;
    OptionReader reader{r, &field};
    std::string decoded_config;
    Context decoded{};
    reader("config", decoded_config);
    visit(decoded, reader);
    if (!r.AtEnd()) {
        if (r.ok())
            r.Fail("the options have bytes after their last field");
        *error = std::string("bad driver options: ") + r.why();
        if (!field.empty())
            *error += " \"" + field + "\"";
        return false;
    }
    *config = std::move(decoded_config);
    *context = std::move(decoded);
    return true;
}

void PutStrings(std::string *out, const std::vector<std::string> &v) {
    PutU32(out, static_cast<uint32_t>(v.size()));
    for (const std::string &s : v)
        PutString(out, s);
}

std::vector<std::string> GetStrings(Reader &r) {
    std::vector<std::string> v;
    uint32_t n = r.Count(4);
    v.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++)
        v.push_back(r.String());
    return v;
}

void PutVerdict(std::string *out, const ConfigVerdict &v) {
    PutStrings(out, v.problems);
    PutStrings(out, v.hints);
    PutU32(out, static_cast<uint32_t>(v.privileged.size()));
    for (const PrivilegedSetting &p : v.privileged) {
        PutString(out, p.key);
        PutString(out, p.value);
        PutU8(out, p.access == ServerAccess::ReadsFiles ? 1 : 0);
        PutString(out, p.problem);
    }
    PutStrings(out, v.hosts);
}

ConfigVerdict GetVerdict(Reader &r) {
    ConfigVerdict v;
    v.problems = GetStrings(r);
    v.hints = GetStrings(r);
    uint32_t n = r.Count(4 + 4 + 1 + 4);
    v.privileged.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); i++) {
        PrivilegedSetting p;
        p.key = r.String();
        p.value = r.String();
        p.access = r.Bool() ? ServerAccess::ReadsFiles : ServerAccess::RunsCode;
        p.problem = r.String();
        v.privileged.push_back(std::move(p));
    }
    v.hosts = GetStrings(r);
    return v;
}

}  // namespace

void PutConfigQuery(std::string *out, const ConfigQuery &q) {
    PutU8(out, q.subscription ? 1 : 0);
    PutString(out, q.kind);
    PutString(out, q.config);
    PutU8(out, q.has_old ? 1 : 0);
    PutString(out, q.old_config);
    PutU8(out, q.check_files ? 1 : 0);
    PutI64(out, q.server.lease_timeout_ms);
    PutString(out, q.server.webhook_allowed_networks);
}

ConfigQuery GetConfigQuery(Reader &r) {
    ConfigQuery q;
    q.subscription = r.Bool();
    q.kind = r.String();
    q.config = r.String();
    q.has_old = r.Bool();
    q.old_config = r.String();
    q.check_files = r.Bool();
    q.server.lease_timeout_ms = r.I64();
    q.server.webhook_allowed_networks = r.String();
    return q;
}

void PutConfigAnswer(std::string *out, const ConfigAnswer &a) {
    PutVerdict(out, a.config);
    PutVerdict(out, a.old);
    PutU8(out, a.server.refused ? 1 : 0);
    PutString(out, a.server.reason);
    PutString(out, a.server.detail);
    PutString(out, a.server.hint);
    PutStrings(out, a.server.problems);
    PutStrings(out, a.server.hints);
}

ConfigAnswer GetConfigAnswer(Reader &r) {
    ConfigAnswer a;
    a.config = GetVerdict(r);
    a.old = GetVerdict(r);
    a.server.refused = r.Bool();
    a.server.reason = r.String();
    a.server.detail = r.String();
    a.server.hint = r.String();
    a.server.problems = GetStrings(r);
    a.server.hints = GetStrings(r);
    return a;
}

}  // namespace wire

std::string EncodeOpenOptions(const std::string &config, const DriverContext &context) {
    return wire::EncodeWith(config, context, [](const DriverContext &c, wire::OptionWriter &v) {
        VisitDriverContext(c, v);
    });
}

std::string EncodeOpenOptions(const std::string &config, const ConsumerContext &context) {
    return wire::EncodeWith(config, context, [](const ConsumerContext &c, wire::OptionWriter &v) {
        VisitConsumerContext(c, v);
    });
}

bool DecodeOpenOptions(std::string_view bytes, std::string *config, DriverContext *context,
                       std::string *error) {
    return wire::DecodeWith(
        bytes, config, context, error,
        [](DriverContext &c, wire::OptionReader &v) { VisitDriverContext(c, v); });
}

bool DecodeOpenOptions(std::string_view bytes, std::string *config, ConsumerContext *context,
                       std::string *error) {
    return wire::DecodeWith(
        bytes, config, context, error,
        [](ConsumerContext &c, wire::OptionReader &v) { VisitConsumerContext(c, v); });
}

}  // namespace outbox::protocol
