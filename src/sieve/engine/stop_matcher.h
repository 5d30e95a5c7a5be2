// Stop strings over streamed text: text is released only once it can no
// longer be the start of a stop string, and a match cuts the output right
// before the stop string (which is never emitted).
//
//   held = "...The e"   stop = "The end"   -> emit "...", hold "The e"
//   push("nd!")         held = "The end!"  -> match at 0: emit "", stop
//
// Input is complete UTF-8 (from StreamDetokenizer) and stop strings are valid
// UTF-8, so a held-back suffix always starts on a character boundary: it equals
// a prefix of a stop string, whose first byte is a lead byte.
#pragma once

#include <string>
#include <vector>

namespace sieve {

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);

    // Appends text; returns the text that is now final. Sets *matched when a
    // stop string occurred: the returned text then ends right before it, and
    // nothing more should be pushed.
    std::string push(const std::string &text, bool *matched);
    // Releases whatever is held back (the sequence ended for another reason).
    std::string flush();

private:
    std::vector<std::string> stops_;
    std::string held_;
};

}  // namespace sieve
