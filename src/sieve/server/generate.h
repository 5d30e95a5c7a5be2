// One completion or chat request from validated request to HTTP body:
// tokenize, check against the context, submit one engine request per choice,
// then turn engine events into OpenAI responses (one JSON body, or SSE chunks).
//
// The HTTP library is kept out of this file: the server backs a ClientLink
// (is the client still there?) and a ChunkSink (SSE output) with the
// connection. Errors known before generation (bad prompt, queue full) come
// from gen_start(). After it, a non-streamed answer is held until every
// choice has finished (gen_collect_json), so an engine error still gets a 500;
// a stream's 200 headers go out at once (gen_write_stream), and an engine
// error arrives as an error event before `data: [DONE]`.
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

// The client of a request, polled while a writer waits for the engine:
// alive() is false once the client closed or reset the connection.
class ClientLink {
public:
    virtual ~ClientLink() = default;
    virtual bool alive() = 0;
};

// Where a streamed body goes. write() returns false when the client is gone.
class ChunkSink : public ClientLink {
public:
    virtual bool write(const std::string &bytes) = 0;
};

// A whole non-streamed answer: 200 with the completion object, or 500 with
// an OpenAI error object when a choice failed in the engine.
struct GenResponse {
    int http_status = 200;
    std::string body;
};

struct GenJob;  // shared between the handler, the writer and engine callbacks

// Tokenizes, checks, submits all n choices. On failure nothing stays queued.
// `n_active` counts live jobs (for draining at shutdown).
std::shared_ptr<GenJob> gen_start(const ServingModel &m, ServerMetrics *metrics, const ApiRequest &req,
                                  std::atomic<int> *n_active, ApiError *err);

// Both block until every choice has finished and return false when the
// client went away first (the caller then calls gen_abort).
// The SSE stream, ending with `data: [DONE]` (after an error event when a
// choice failed in the engine).
bool gen_write_stream(GenJob &job, ChunkSink &sink);
// The non-streamed answer, written by the caller once it is known.
bool gen_collect_json(GenJob &job, ClientLink &client, GenResponse *out);

// Cancels the choices that have not finished (client gone, shutdown).
void gen_abort(GenJob &job);

}  // namespace sieve
