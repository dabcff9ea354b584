// `adworker tokenize --vocab PATH TEXT...`: prints CLIP token ids, one JSON array per text per
// line, without start/end tokens (the lead wires the flag parsing in worker/main.cc).
// Thread-compatible.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace adctl {

// `vocab_path`: CLIP's .gz merges file or a Hugging Face tokenizer folder (ClipTokenizer::Load).
// Returns 0, or 2 (bad spec or command line, common/worker_contract.h) when the vocabulary does not
// load; the error goes to `err`.
int RunTokenizeCommand(const std::string& vocab_path, const std::vector<std::string>& texts,
                       std::ostream& out, std::ostream& err);

}  // namespace adctl
