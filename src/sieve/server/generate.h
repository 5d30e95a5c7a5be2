// One completion or chat request from validated request to HTTP body:
// tokenize, check against the context, submit one engine request per choice,
// then turn engine events into OpenAI responses (one JSON body, or SSE chunks).
//
// The HTTP library is kept out of this file: output goes to a ChunkSink, which
// the server backs with the connection. Split in two so that errors known
// before any byte is sent (bad prompt, queue full) still get their own HTTP
// status: gen_start() runs in the request handler, gen_write_*() in the
// response writer after the 200 headers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "sieve/engine/engine.h"
#include "sieve/server/api_request.h"
#include "sieve/server/metrics.h"
#include "sieve/tokenizer/chat_template.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {

// What the server serves once the model is loaded.
struct ServingModel {
    Engine *engine = nullptr;
    const Tokenizer *tok = nullptr;
    bool has_template = false;
    ChatTemplate tmpl;
    std::string model_id;  // --served-model-name, or the file's base name
    int64_t created = 0;   // unix seconds at start-up, for "created"
};

// Where a response body goes. write() returns false when the client is gone;
// alive() also notices a peer that closed while nothing was being written.
class ChunkSink {
public:
    virtual ~ChunkSink() = default;
    virtual bool write(const std::string &bytes) = 0;
    virtual bool alive() = 0;
};

struct GenJob;  // shared between the handler, the writer and engine callbacks

// Tokenizes, checks, submits all n choices. On failure nothing stays queued.
// `n_active` counts live jobs (for draining at shutdown).
std::shared_ptr<GenJob> gen_start(const ServingModel &m, ServerMetrics *metrics, const ApiRequest &req,
                                  std::atomic<int> *n_active, ApiError *err);

// Writes the whole response; returns false when the client went away (the
// caller then calls gen_abort). Blocks until every choice has finished.
bool gen_write_stream(GenJob &job, ChunkSink &sink);
bool gen_write_json(GenJob &job, ChunkSink &sink);

// Cancels the choices that have not finished (client gone, shutdown).
void gen_abort(GenJob &job);

}  // namespace sieve
