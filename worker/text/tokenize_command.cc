#include "worker/text/tokenize_command.h"

#include "common/worker_contract.h"
#include "worker/text/clip_tokenizer.h"

namespace adctl {

int RunTokenizeCommand(const std::string& vocab_path, const std::vector<std::string>& texts,
                       std::ostream& out, std::ostream& err) {
  Result<ClipTokenizer> tokenizer = ClipTokenizer::Load(vocab_path);
  if (!tokenizer.ok()) {
    err << "tokenize: " << tokenizer.status().ToString() << "\n";
    return kExitBadSpec;
  }
  for (const std::string& text : texts) {
    std::vector<int> ids = tokenizer->Encode(text);
    out << "[";
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
    out << "]\n";
  }
  return 0;
}

}  // namespace adctl
