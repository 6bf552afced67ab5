"""Replace std::regex in DeepGEMM's JIT (csrc/jit/include_parser.hpp and compiler.hpp @ 54e2261) by plain scans.

On the lent machine (torch 2.11.0+cu130, extension built by g++ 13.3) constructing the std::regex of
IncludeParser::get_includes dies of SIGSEGV inside libstdc++'s regex compiler (2026-12-07 05:54, a C backtrace through
LD_PRELOAD'ed .gpu/segv.c), so every JIT kernel crashed. The scan keeps what the parser uses: the `<deep_gemm/...>`
names of `#include <...>` lines. Build-time workaround only: it changes which headers the cache key hashes, not a kernel."""
import os
import sys

root = sys.argv[1]   # the DeepGEMM checkout
path = os.path.join(root, "csrc/jit/include_parser.hpp")
src = open(path).read()
start = src.index("        const std::regex pattern(")
end = src.index("        return includes;", start)
scan = '''        // (patched: a plain scan instead of std::regex, which crashes in this environment)
        for (size_t pos = code.find("#include <"); pos != std::string::npos; pos = code.find("#include <", pos + 1)) {
            const auto close = code.find('>', pos);
            if (close == std::string::npos)
                break;
            std::string filename = code.substr(pos + 10, close - pos - 10);
            if (filename.substr(0, 9) == "deep_gemm")  // We only parse `<deep_gemm/*>`
                includes.push_back(filename);
        }
'''
open(path, "w").write(src[:start] + scan + src[end:])
print("patched", path)

# NVCCCompiler::get_nvcc_version's regex (compiler.hpp l.184-186): the "release X.Y" of `nvcc --version` by find + sscanf
path = os.path.join(root, "csrc/jit/compiler.hpp")
src = open(path).read()
old = """        std::smatch match;
        DG_HOST_ASSERT(std::regex_search(output, match, std::regex(R"(release (\\d+\\.\\d+))")));
        std::sscanf(match[1].str().c_str(), "%d.%d", &major, &minor);"""
new = """        const auto release = output.find("release ");   // (patched: no std::regex)
        DG_HOST_ASSERT(release != std::string::npos);
        DG_HOST_ASSERT(std::sscanf(output.c_str() + release + 8, "%d.%d", &major, &minor) == 2);"""
assert old in src, "compiler.hpp: version regex not found"
open(path, "w").write(src.replace(old, new))
print("patched", path)
