/*
 * thread_exit.c: a thread's list of work for its end (thread_exit.h).
 */
#include "proto/thread_exit.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct call {
    void (*fn)(void *arg);
    void *arg;
    struct call *next;
};

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int key_error;

/* The key's destructor: the thread's calls, newest first, so that a
 * cache made from another's first use is freed before the one it used. */
static void calls_run(void *head)
{
    for (struct call *c = head; c != NULL;) {
        struct call *next = c->next;
        c->fn(c->arg);
        free(c);
        c = next;
    }
}

static void key_make(void)
{
    key_error = pthread_key_create(&key, calls_run);
}

int thread_exit_call(void (*fn)(void *arg), void *arg)
{
    pthread_once(&key_once, key_make);
    if (key_error != 0)
        return -ENOMEM; /* out of keys (PTHREAD_KEYS_MAX is 1024) */
    struct call *c = malloc(sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->fn = fn;
    c->arg = arg;
    c->next = pthread_getspecific(key);
    if (pthread_setspecific(key, c) != 0) {
        free(c);
        return -ENOMEM;
    }
    return 0;
}

void *thread_exit_calloc(size_t size, void (*fn)(void *block))
{
    void *block = calloc(1, size);
    if (block != NULL && thread_exit_call(fn, block) != 0) {
        free(block);
        return NULL;
    }
    return block;
}
