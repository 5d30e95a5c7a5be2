#include <cstdio>
#include <cstring>

int main(int argc, char **argv) {
    std::fprintf(stderr, "usage: sieve <run|info> ...\n");
    return argc > 1 && std::strcmp(argv[1], "--help") == 0 ? 0 : 1;
}
