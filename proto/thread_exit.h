/*
 * thread_exit.h: work to run when the calling thread ends.  Worker
 * threads keep caches of their own (freed exchanges, large blocks, open
 * files, cache entries, trace batches) that no lock guards; each is made
 * on its thread's first use and must be freed when that thread ends, or
 * a reload that ends a generation's threads would leak them.  One POSIX
 * key serves every such cache: a thread's registrations form a list of
 * its own, run newest first when the thread exits.
 */
#ifndef CORRAL_PROTO_THREAD_EXIT_H
#define CORRAL_PROTO_THREAD_EXIT_H

#include <stddef.h>

/* Calls fn(arg) when the calling thread ends (pthread_exit or a return
 * from its start function; not at process exit on the main thread).
 * Returns 0, or -ENOMEM, when fn will not be called. */
int thread_exit_call(void (*fn)(void *arg), void *arg);

/* A zeroed block of `size` bytes for the calling thread's cache, passed
 * to fn() when the thread ends (fn frees it).  Returns NULL when out of
 * memory, with nothing registered. */
void *thread_exit_calloc(size_t size, void (*fn)(void *block));

#endif
