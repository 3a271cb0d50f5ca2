// Clang's thread-safety attributes (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html) under
// short names. A member declared GUARDED_BY(mu_) may be read or written only with mu_ held; a
// method declared REQUIRES(mu_) may be called only with mu_ held, EXCLUDES(mu_) only without.
// The locks that carry these attributes are common/mutex.h's. Clang checks them with
// -Wthread-safety (the CI stage "tsa", scripts/ci_tsa.sh); on other compilers (GCC builds kvgate)
// every macro expands to nothing, so the annotations cost nothing and change no code.
#pragma once

#if defined(__clang__)
#define KVGATE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVGATE_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are locks ("mutex" names the kind in diagnostics).
#define CAPABILITY(x) KVGATE_THREAD_ANNOTATION(capability(x))
// On a class: an RAII guard that holds a lock from its constructor to its destructor.
#define SCOPED_CAPABILITY KVGATE_THREAD_ANNOTATION(scoped_lockable)

// On a data member: accessed only with the lock held (shared for reads, exclusive for writes).
#define GUARDED_BY(x) KVGATE_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: the pointee (not the pointer) is accessed only with the lock held.
#define PT_GUARDED_BY(x) KVGATE_THREAD_ANNOTATION(pt_guarded_by(x))

// On a function: the caller must hold the lock(s), exclusively or at least shared.
#define REQUIRES(...) KVGATE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) KVGATE_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: the caller must not hold the lock(s) (the function takes them itself).
#define EXCLUDES(...) KVGATE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// On a function: it takes / releases the lock(s) (no argument: `this`, for a lock's own methods).
#define ACQUIRE(...) KVGATE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) KVGATE_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) KVGATE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) KVGATE_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVGATE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: the analysis may assume the lock held after the call (a runtime check, or none).
#define ASSERT_CAPABILITY(x) KVGATE_THREAD_ANNOTATION(assert_capability(x))

// On a function: not analysed. Only with a comment that says why the accesses are safe (for
// example: constructor- or destructor-time access, when no other thread can see the object).
#define NO_THREAD_SAFETY_ANALYSIS KVGATE_THREAD_ANNOTATION(no_thread_safety_analysis)
