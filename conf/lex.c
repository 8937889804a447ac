/*
 * lex.c: the config language's tokens: bare words, quoted strings with
 * their escapes, ";", "{" and "}", with comments and blanks skipped and
 * each token's position kept for messages.
 */
#include "lex.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool ends_word(char c)
{
    return is_space(c) || c == ';' || c == '{' || c == '}';
}

static void advance(struct lexer *lx)
{
    if (*lx->p == '\n') {
        lx->pos.line++;
        lx->pos.col = 1;
    } else {
        lx->pos.col++;
    }
    lx->p++;
}

static bool printable(char c)
{
    return c > 0x20 && c < 0x7f;
}

/* "x" in quotes, '"' for a double quote, or "byte 0x01" for what would
 * not print. */
static const char *show_byte(char c, char buf[16])
{
    if (c == '"')
        snprintf(buf, 16, "'\"'");
    else if (printable(c))
        snprintf(buf, 16, "\"%c\"", c);
    else
        snprintf(buf, 16, "byte 0x%02x", (unsigned char)c);
    return buf;
}

static int lex_string(struct conf_error *error, struct lexer *lx, struct token *tok)
{
    char quote = *lx->p;
    /* Find the closing quote first, to size the copy. */
    size_t max = 0;
    const char *s = lx->p + 1;
    for (; s < lx->end && *s != quote; s++, max++)
        if (*s == '\\' && s + 1 < lx->end)
            s++;
    if (s >= lx->end)
        return conf__error_at(error, &tok->pos, "unterminated string");

    char *text = malloc(max + 1);
    if (text == NULL)
        return conf__error_at(error, &tok->pos, "out of memory");
    size_t len = 0;
    char shown[16];
    advance(lx);
    while (*lx->p != quote) {
        char c = *lx->p;
        if (c == '\0') {
            free(text);
            return conf__error_at(error, &lx->pos, "unexpected NUL byte");
        }
        if (c == '\\') {
            struct conf_pos escape = lx->pos;
            advance(lx);
            switch (*lx->p) {
            case '"':
            case '\'':
            case '\\': c = *lx->p; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break; /* nginx's too: a match block's send */
            case 't': c = '\t'; break;
            default:
                free(text);
                if (printable(*lx->p))
                    return conf__error_at(error, &escape,
                                          "unknown escape \"\\%c\" (use \\\", \\', \\\\, \\n, "
                                          "\\r or \\t)",
                                          *lx->p);
                return conf__error_at(error, &escape, "unknown escape: \"\\\" followed by %s",
                                      show_byte(*lx->p, shown));
            }
        }
        assert(len < max); /* the scan above counted what this loop copies */
        text[len++] = c;
        advance(lx);
    }
    advance(lx);
    text[len] = '\0';
    /* `"a"b` is almost certainly a mistake; nothing may touch a string but
     * what ends a word, and, as in nginx, the ")" that closes an if's
     * condition (`if ($a ~ "b c")`), a word of its own. */
    if (lx->p < lx->end && !ends_word(*lx->p) && *lx->p != '#' && *lx->p != ')') {
        free(text);
        return conf__error_at(error, &lx->pos, "unexpected %s after a quoted string",
                              show_byte(*lx->p, shown));
    }
    tok->text = text;
    return 0;
}

static int lex_word(struct conf_error *error, struct lexer *lx, struct token *tok)
{
    const char *start = lx->p;
    char shown[16];
    for (; lx->p < lx->end && !ends_word(*lx->p); advance(lx)) {
        if (*lx->p == '\0')
            return conf__error_at(error, &lx->pos, "unexpected NUL byte");
        if (*lx->p == '"' || *lx->p == '\'')
            return conf__error_at(error, &lx->pos,
                                  "unexpected %s inside a word (quote the whole argument)",
                                  show_byte(*lx->p, shown));
    }
    tok->text = strndup(start, (size_t)(lx->p - start));
    if (tok->text == NULL)
        return conf__error_at(error, &tok->pos, "out of memory");
    return 0;
}

int conf__next_token(struct conf_error *error, struct lexer *lx, struct token *tok)
{
    while (lx->p < lx->end) {
        if (is_space(*lx->p)) {
            advance(lx);
        } else if (*lx->p == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                advance(lx);
        } else {
            break;
        }
    }
    *tok = (struct token){.type = TOKEN_WORD, .pos = lx->pos};
    if (lx->p == lx->end) {
        tok->type = TOKEN_END;
        return 0;
    }
    switch (*lx->p) {
    case ';': tok->type = TOKEN_SEMICOLON; break;
    case '{': tok->type = TOKEN_OPEN; break;
    case '}': tok->type = TOKEN_CLOSE; break;
    case '"':
    case '\'': return lex_string(error, lx, tok);
    default: return lex_word(error, lx, tok);
    }
    advance(lx);
    return 0;
}
