// adctl diff A B: two jobs side by side (the logic and its tests: cli/diff.h).
#include "cli/diff.h"

#include <memory>
#include <string>

#include "cli/commands/commands.h"

namespace adctl::cli {
namespace {

struct DiffArgs {
  std::string job_a, job_b;
};

}  // namespace

void RegisterDiff(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<DiffArgs>();
  auto* diff =
      app.add_subcommand("diff", "two jobs side by side: spec fields that differ, latest metrics");
  diff->add_option("A", a->job_a, "job id")->required();
  diff->add_option("B", a->job_b, "job id")->required();
  diff->callback(ctx.Run([&ctx, a](Client& c) { return Diff(c, ctx.json(), a->job_a, a->job_b); }));
}

}  // namespace adctl::cli
