#include "sieve/engine/stop_matcher.h"

#include <algorithm>

namespace sieve {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopMatcher::push(const std::string &text, bool *matched) {
    *matched = false;
    held_ += text;
    if (stops_.empty()) return flush();

    // 1. The earliest complete occurrence of any stop string wins.
    size_t cut = std::string::npos;
    for (const std::string &s : stops_) cut = std::min(cut, held_.find(s));
    if (cut != std::string::npos) {
        *matched = true;
        std::string out = held_.substr(0, cut);
        held_.clear();
        return out;
    }

    // 2. Hold back the longest suffix that is a proper prefix of a stop string.
    size_t keep = 0;
    for (const std::string &s : stops_) {
        const size_t max_len = std::min(held_.size(), s.size() - 1);
        for (size_t len = max_len; len > keep; --len) {
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
        }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace sieve
