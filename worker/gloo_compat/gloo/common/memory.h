/*
 * A stand-in for gloo/common/memory.h, which Debian's libgloo-dev does not
 * ship although gloo/transport/tcp/pair.h includes it. comm_gloo.cpp needs
 * pair.h only to call tcp::Pair::signalExceptionExternal (defined in
 * libgloo, public) on the pairs of a comm it aborts; it never constructs,
 * copies or reads the members these pointer types are used for, so only
 * their names must exist here. Used only where the real header is missing
 * (worker/comm.cmake).
 */
#ifndef FT_GLOO_COMPAT_MEMORY_H
#define FT_GLOO_COMPAT_MEMORY_H

#include <memory>

namespace gloo {

template <typename T> class NonOwningPtr {
public:
  NonOwningPtr() = default;
  T *get() const {
    return ptr_.get();
  }

private:
  std::shared_ptr<T> ptr_;
};

template <typename T> class WeakNonOwningPtr {
public:
  WeakNonOwningPtr() = default;

private:
  std::weak_ptr<T> ptr_;
};

} // namespace gloo

#endif
