// Incremental parser for a Server-Sent Events stream (the WHATWG "event
// stream" format that OpenAI streaming responses use), and the part of an
// OpenAI stream chunk that `sieve bench-serve` measures.
//
// Header-only: the command-line front end is not part of libsieve, and the
// unit tests (which link only libsieve) test this code directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sieve::cli {

// Feed bytes as they arrive, split anywhere; complete events come out.
// Rules kept (HTML spec, "event stream interpretation"):
//   1. lines end with "\r\n", "\n" or "\r" (a "\r" at the end of a feed may be
//      the first half of "\r\n", so the next byte decides);
//   2. a line starting with ':' is a comment (servers send them as keep-alives);
//   3. "data:VALUE" appends VALUE (one leading space dropped) plus "\n" to the
//      event's data; other fields (event, id, retry) are ignored here;
//   4. an empty line dispatches the event, without its final "\n"; an event
//      with no data line is not dispatched.
// A line longer than max_line_bytes is an error (a server streaming garbage
// must not make the client buffer without bound).
class SseParser {
public:
    explicit SseParser(size_t max_line_bytes = size_t(1) << 24) : max_line_bytes_(max_line_bytes) {}

    // Appends the data of each event completed by these bytes to *events.
    // False (and error() says why) once the stream is unusable.
    bool feed(std::string_view bytes, std::vector<std::string> *events) {
        if (failed_) return false;
        for (char c : bytes) {
            if (after_cr_) {
                after_cr_ = false;
                if (c == '\n') continue;  // second half of "\r\n"
            }
            if (c == '\r' || c == '\n') {
                after_cr_ = c == '\r';
                end_line(events);
                continue;
            }
            if (line_.size() >= max_line_bytes_) {
                failed_ = true;
                error_ = "event-stream line longer than " + std::to_string(max_line_bytes_) + " bytes";
                return false;
            }
            line_.push_back(c);
        }
        return true;
    }

    // True when bytes of an unfinished event are still buffered (a stream that
    // ends here was cut off mid-event).
    bool has_partial_event() const { return !line_.empty() || has_data_; }
    const std::string &error() const { return error_; }

private:
    void end_line(std::vector<std::string> *events) {
        if (line_.empty()) {
            if (has_data_) {
                data_.pop_back();  // the "\n" after the last data line
                events->push_back(std::move(data_));
            }
            data_.clear();
            has_data_ = false;
            return;
        }
        if (line_[0] != ':') {
            std::string_view line(line_);
            size_t colon = line.find(':');
            std::string_view field = line.substr(0, colon);
            std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
            if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
            if (field == "data") {
                data_.append(value);
                data_.push_back('\n');
                has_data_ = true;
            }
        }
        line_.clear();
    }

    size_t max_line_bytes_;
    std::string line_;
    std::string data_;
    bool has_data_ = false;
    bool after_cr_ = false;
    bool failed_ = false;
    std::string error_;
};

// What one event of an OpenAI completions / chat-completions stream carries
// for the benchmark.
struct StreamChunk {
    bool done = false;          // the "[DONE]" sentinel
    std::string text;           // choices[0].text or choices[0].delta.content
    bool has_usage = false;     // a usage object (stream_options.include_usage)
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens (prefix cache), 0 if absent
    std::string error;          // an error object sent inside the stream
};

// Parses one event's data; false with *why set when it is not a stream chunk.
inline bool parse_stream_chunk(const std::string &data, bool chat, StreamChunk *out, std::string *why) {
    *out = StreamChunk{};
    if (data == "[DONE]") {
        out->done = true;
        return true;
    }
    nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        *why = "stream event is not a JSON object: " + data.substr(0, 200);
        return false;
    }
    if (j.contains("error")) {
        const nlohmann::json &e = j["error"];
        out->error = e.is_object() && e.contains("message") && e["message"].is_string()
                         ? e["message"].get<std::string>()
                         : e.dump();
        return true;
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const nlohmann::json &c = j["choices"][0];
        const nlohmann::json *t = nullptr;
        if (chat) {
            if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content"))
                t = &c["delta"]["content"];
        } else if (c.contains("text")) {
            t = &c["text"];
        }
        if (t != nullptr && t->is_string()) out->text = t->get<std::string>();
    }
    if (j.contains("usage") && j["usage"].is_object()) {
        const nlohmann::json &u = j["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
            out->has_usage = true;
            out->completion_tokens = u["completion_tokens"].get<int64_t>();
            if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
                out->prompt_tokens = u["prompt_tokens"].get<int64_t>();
            const auto d = u.find("prompt_tokens_details");
            if (d != u.end() && d->is_object() && d->contains("cached_tokens") &&
                (*d)["cached_tokens"].is_number_integer())
                out->cached_tokens = (*d)["cached_tokens"].get<int64_t>();
        }
    }
    return true;
}

}  // namespace sieve::cli
