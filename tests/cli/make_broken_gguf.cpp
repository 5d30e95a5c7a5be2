// Writes the broken-GGUF corpus (tests/data/gguf_broken) and its manifest,
// expected.txt: one line per file, "name<TAB>stage<TAB>expected error text".
//
//   make_broken_gguf tests/data/gguf_broken
//
// The cases themselves live in tests/unit/gguf_broken_corpus.h so the unit
// tests can check the committed files are exactly what this program makes.
#include <cstdio>
#include <string>

#include "../unit/gguf_broken_corpus.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_broken_gguf OUT_DIR\n");
        return 2;
    }
    const std::string dir = argv[1];
    const std::string manifest_path = dir + "/expected.txt";
    FILE *manifest = std::fopen(manifest_path.c_str(), "w");
    if (!manifest) {
        std::fprintf(stderr, "make_broken_gguf: cannot create '%s'\n", manifest_path.c_str());
        return 1;
    }
    std::fprintf(manifest, "# file\tstage (gguf: the reader rejects it, config: the model check does)\texpected error text\n");
    for (const gguf_test::BrokenCase &c : gguf_test::make_broken_corpus()) {
        const std::string path = dir + "/" + c.name;
        FILE *f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(c.bytes.data(), 1, c.bytes.size(), f) != c.bytes.size() || std::fclose(f) != 0) {
            std::fprintf(stderr, "make_broken_gguf: cannot write '%s'\n", path.c_str());
            return 1;
        }
        std::fprintf(manifest, "%s\t%s\t%s\n", c.name.c_str(), c.stage.c_str(), c.expect.c_str());
    }
    return std::fclose(manifest) == 0 ? 0 : 1;
}
