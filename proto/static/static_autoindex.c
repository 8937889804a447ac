/*
 * static_autoindex.c: a directory's listing (static_autoindex.h), in
 * nginx's layout: "Index of PATH", a "../" link, then one line per entry
 * with its name (cut at 50 columns), its time and its size ("-" for a
 * directory).
 */
#include "proto/static/static_autoindex.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_COLUMNS 50

struct entry {
    char *name;
    bool dir;
    int64_t mtime;
    uint64_t size;
};

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->dir != y->dir)
        return x->dir ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void add_text(struct vars_buf *b, const char *text)
{
    vars_buf_add(b, text, strlen(text));
}

/* For the text of the page. */
static void add_html(struct vars_buf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        switch (s[i]) {
        case '&': add_text(b, "&amp;"); break;
        case '<': add_text(b, "&lt;"); break;
        case '>': add_text(b, "&gt;"); break;
        case '"': add_text(b, "&quot;"); break;
        default: vars_buf_add(b, &s[i], 1);
        }
    }
}

/* For a link: every byte but the unreserved ones percent-encoded. */
static void add_href(struct vars_buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            vars_buf_add(b, s, 1);
        } else {
            char hex[3] = {'%', "0123456789ABCDEF"[c >> 4], "0123456789ABCDEF"[c & 15]};
            vars_buf_add(b, hex, 3);
        }
    }
}

static void free_entries(struct entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

int static_autoindex_page(int fd, const char *uri, size_t len, struct vars_buf *out)
{
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        int err = -errno;
        close(fd);
        return err;
    }
    struct entry *entries = NULL;
    size_t count = 0, cap = 0;
    int err = 0;
    struct dirent *d;
    errno = 0;
    while (count < STATIC_AUTOINDEX_MAX && (d = readdir(dir)) != NULL) {
        if (d->d_name[0] == '.')
            continue; /* hidden, and "." and "..", as nginx */
        struct stat st;
        if (fstatat(dirfd(dir), d->d_name, &st, 0) == -1)
            continue; /* gone, or a dangling link: nginx skips it too */
        if (count == cap) {
            size_t grown = cap > 0 ? cap * 2 : 64;
            struct entry *e = realloc(entries, grown * sizeof(*e));
            if (e == NULL) {
                err = -ENOMEM;
                break;
            }
            entries = e;
            cap = grown;
        }
        char *name = strdup(d->d_name);
        if (name == NULL) {
            err = -ENOMEM;
            break;
        }
        entries[count++] = (struct entry){.name = name,
                                          .dir = S_ISDIR(st.st_mode),
                                          .mtime = (int64_t)st.st_mtim.tv_sec,
                                          .size = (uint64_t)st.st_size};
    }
    closedir(dir);
    if (err != 0) {
        free_entries(entries, count);
        return err;
    }
    if (count > 1)
        qsort(entries, count, sizeof(*entries), entry_cmp);
    add_text(out, "<html>\r\n<head><title>Index of ");
    add_html(out, uri, len);
    add_text(out, "</title></head>\r\n<body>\r\n<h1>Index of ");
    add_html(out, uri, len);
    add_text(out, "</h1><hr><pre><a href=\"../\">../</a>\r\n");
    for (size_t i = 0; i < count; i++) {
        const struct entry *e = &entries[i];
        add_text(out, "<a href=\"");
        add_href(out, e->name);
        if (e->dir)
            add_text(out, "/");
        add_text(out, "\">");
        size_t n = strlen(e->name) + (e->dir ? 1 : 0);
        size_t shown = strlen(e->name);
        bool cut = n > NAME_COLUMNS;
        if (cut)
            shown = NAME_COLUMNS - 3;
        add_html(out, e->name, shown);
        if (cut)
            add_text(out, "..&gt;");
        else if (e->dir)
            add_text(out, "/");
        add_text(out, "</a>");
        for (size_t pad = cut ? NAME_COLUMNS : n; pad <= NAME_COLUMNS; pad++)
            add_text(out, " ");
        char line[64];
        time_t t = (time_t)e->mtime;
        struct tm tm;
        if (gmtime_r(&t, &tm) == NULL)
            tm = (struct tm){.tm_mday = 1, .tm_year = 70};
        strftime(line, sizeof(line), "%d-%b-%Y %H:%M", &tm);
        add_text(out, line);
        if (e->dir)
            snprintf(line, sizeof(line), "%20s\r\n", "-");
        else
            snprintf(line, sizeof(line), "%20llu\r\n", (unsigned long long)e->size);
        add_text(out, line);
    }
    add_text(out, "</pre><hr></body>\r\n</html>\r\n");
    free_entries(entries, count);
    return 0;
}
