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
    EXCHANGE_SLOTS,
};

/* The order of the response filter chain (exchange.h): a response head
 * goes through the header filters, its body through the body filters,
 * from the first place to the last, then to the framer.  A filter sees
 * what those before it made of the response. */
enum exchange_filter_order {
    /* error_page.c: an error page goes out with the error's status (or
     * the "=code" given): first, so that what follows sees that status. */
    EXCHANGE_FILTER_STATUS,
    /* add_header.c: the location's add_header lines, chosen by the final
     * status. */
    EXCHANGE_FILTER_ADD_HEADER,
    EXCHANGE_FILTERS,
};

#endif
