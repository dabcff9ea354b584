// main() of the dist test binaries: a rank process runs its role, otherwise the tests run.
#include <gtest/gtest.h>

#include "tests/dist/multiprocess.h"

int main(int argc, char** argv) {
  if (std::optional<int> exit_code = adctl::test::RunRoleIfChild()) return *exit_code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
