/*
 * epoll_native.h: the epoll_create1() flags of the round-robin and
 * CPU-affinity epoll sets, with the values the patches in tests/kernel/
 * give them.  Mainline Linux has neither and refuses both with EINVAL, so
 * every build carries the native modes and the probe decides at run time.
 */
#ifndef CORRAL_EPOLL_NATIVE_H
#define CORRAL_EPOLL_NATIVE_H

#include <sys/epoll.h>

#ifndef EPOLL_ROTATE
#define EPOLL_ROTATE 0x1
#endif
#ifndef EPOLL_AFFINITY
#define EPOLL_AFFINITY 0x2
#endif

#endif
