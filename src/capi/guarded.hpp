// How the C ABI's entry points turn exceptions into return codes and the
// thread's last error message (dw_last_error); shared by every src/capi file.
#pragma once
#include <mutex>
#include <memory>
#include <new>
#include <string>

#include "deepwell/c/deepwell.h"
#include "deepwell/common/error.hpp"
#include "cuda_shim.hpp"
#include "last_error.hpp"

namespace deepwell::capi {

// An error with its return code chosen by the entry point.
struct api_error : error {
  int code;
  api_error(int c, const std::string& m) : error(m), code(c) {}
};

// Throws DW_EINVAL with `message` unless ok.
inline void need(bool ok, const std::string& message) {
  if (!ok) throw api_error(DW_EINVAL, message);
}

// Runs f; DW_OK, or the code of what it threw: its own (api_error),
// DW_ENOCUDA, DW_EIO (data_error: the storage is wrong or its I/O failed),
// DW_EINVAL (other deepwell::error: bad input), DW_ERUNTIME (anything else).
template <class F>
int guarded(F&& f) {
  try {
    f();
    return DW_OK;
  } catch (const api_error& e) {
    last_error() = e.what();
    return e.code;
  } catch (const no_cuda& e) {
    last_error() = e.what();
    return DW_ENOCUDA;
  } catch (const data_error& e) {
    last_error() = e.what();
    return DW_EIO;
  } catch (const error& e) {
    last_error() = e.what();
    return DW_EINVAL;
  } catch (const std::bad_alloc&) {
    last_error() = "out of host memory";
    return DW_ERUNTIME;
  } catch (const std::exception& e) {
    last_error() = e.what();
    return DW_ERUNTIME;
  } catch (...) {
    last_error() = "unknown error";
    return DW_ERUNTIME;
  }
}

// The object behind a handle; DW_EINVAL naming its kind when it is null.
template <class T>
T& handle_of(T* p, const char* kind) {
  need(p != nullptr, std::string("null deepwell ") + kind + " handle (closed?)");
  return *p;
}


// dw_*_close of a handle its destructor tears down: NULL is ignored.
template <class H>
int close_handle(H* h) {
  if (!h) return DW_OK;
  return guarded([&] { delete h; });
}
// An entry point that only forwards to a handle's store: runs f(store),
// guarded, with the handle's device current.
template <class H, class F>
int forward_to_store(H* p, const char* kind, F&& f) {
  return guarded([&] {
    H& h = handle_of(p, kind);
    const std::lock_guard<std::mutex> one(h.calls);
    const device_guard g = on_device(h.device);
    f(*h.store);
  });
}
}  // namespace deepwell::capi
