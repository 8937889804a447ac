/*
 * probe_print.h: printing `corral --probe` (probe_print.c).
 */
#ifndef CORRAL_CMD_PROBE_PRINT_H
#define CORRAL_CMD_PROBE_PRINT_H

/* Prints to stdout the kernel's capabilities, the CPUs, and what each
 * wakeup mode resolves to on this kernel. */
void print_probe(void);

#endif
