/*
 * version.c: the library's own version, for a program to compare at run
 * time with the header's it was built with.
 */
#include "internal.h"

unsigned corral_version(void)
{
    return CORRAL_VERSION_HEX;
}

const char *corral_version_string(void)
{
    return CORRAL_VERSION;
}
