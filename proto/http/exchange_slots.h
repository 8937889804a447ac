/*
 * exchange_slots.h: the slots of struct exchange's ctx[] (exchange.h), one
 * per module that keeps state per exchange, as nginx's ctx_index: the
 * exchange knows no module, each module finds its state by its slot.
 */
#ifndef CORRAL_PROTO_EXCHANGE_SLOTS_H
#define CORRAL_PROTO_EXCHANGE_SLOTS_H

enum exchange_slot {
    EXCHANGE_SLOT_LIMIT,      /* limit.c: struct limit_exchange */
    EXCHANGE_SLOT_ERROR_PAGE, /* error_page.c: struct error_page_state */
    EXCHANGE_SLOT_ADD_HEADER, /* add_header.c: the rules (struct http_add_headers) */
    EXCHANGE_SLOT_ADD_EARLY,  /* add_header.c: their values read early */
    EXCHANGE_SLOTS,           /* then those http_module_init() gives (module.h) */
};

/* The order of the response filter chain (exchange.h) is the order of
 * the modules that have a filter in the list of modules (proto/modules.c):
 * a response head goes through the header filters, its body through the
 * body filters, from the first place to the last, then to the framer, and
 * a filter sees what those before it made of the response. */

#endif
