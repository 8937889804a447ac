/*
 * lex.h: the lexer (lex.c) as the parser (parse.c) uses it.  Nothing here
 * is visible outside conf/.
 */
#ifndef CORRAL_CONF_LEX_H
#define CORRAL_CONF_LEX_H

#include "registry.h"

enum token_type {
    TOKEN_WORD, /* a bare word or a quoted string */
    TOKEN_SEMICOLON,
    TOKEN_OPEN,
    TOKEN_CLOSE,
    TOKEN_END,
};

struct token {
    enum token_type type;
    char *text; /* TOKEN_WORD: unescaped and malloc'd; the taker frees it */
    struct conf_pos pos;
};

struct lexer {
    const char *p, *end;
    struct conf_pos pos; /* of *p */
};

/* Reads the next token, skipping blanks and comments.  A comment starts
 * with "#" where a word could start and runs to the end of the line.
 * Returns 0, or -1 with `error` written. */
int conf__next_token(struct conf_error *error, struct lexer *lx, struct token *tok);

#endif
