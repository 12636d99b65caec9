// Errors: one exception type, and checks whose messages say what is wrong and how to fix it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace dflash {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }
}  // namespace detail

}  // namespace dflash

// DF_CHECK(cond, "op: what is wrong" << values << "; fix: what to change");
#define DF_CHECK(cond, msg)                                  \
  do {                                                       \
    if (!(cond)) {                                           \
      std::ostringstream df_check_os_;                       \
      df_check_os_ << msg;                                   \
      ::dflash::detail::fail(df_check_os_.str());            \
    }                                                        \
  } while (0)

#define DF_FAIL(msg)                                         \
  do {                                                       \
    std::ostringstream df_check_os_;                         \
    df_check_os_ << msg;                                     \
    ::dflash::detail::fail(df_check_os_.str());              \
  } while (0)
