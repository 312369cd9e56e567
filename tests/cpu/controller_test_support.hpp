// A test suite run once per io backend of the controller (io_uring, where
// the kernel has it, and the thread pool): the fixture's config() names the
// suite's backend, and backend_label gives the instances readable names.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "deepwell/controller/controller.hpp"
#include "deepwell/targets/io_engine.hpp"

namespace deepwell::test {

class backend_param_test : public ::testing::TestWithParam<io_backend> {
 protected:
  controller_config config(unsigned pollers = 1) {
    controller_config c;
    c.pollers = pollers;
    c.backend = GetParam();
    return c;
  }
  void SetUp() override {
    if (GetParam() == io_backend::uring && !io_uring_available()) GTEST_SKIP() << "io_uring unavailable here";
  }
};

inline std::string backend_label(const ::testing::TestParamInfo<io_backend>& i) {
  return i.param == io_backend::uring ? "uring" : "threads";
}

}  // namespace deepwell::test
