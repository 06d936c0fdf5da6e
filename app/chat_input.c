/* The messages of `moestream chat`: libedit on a terminal, lines of any
 * length from a pipe. See chat_input.h.
 *
 * Bracketed paste: the terminal is asked to mark pastes (ESC [ ? 2004 h);
 * libedit calls on_paste at the start marker, which reads the pasted bytes
 * straight from the terminal up to the end marker (libedit reads a byte at
 * a time, so nothing after the marker was taken) and gives back what came
 * after it with el_push. A short one-line paste is inserted as typed; a
 * longer one is kept aside and the line shows a tag in its place, expanded
 * when the line is entered (so a 60,000-character paste neither redraws
 * the line editor nor is cut). */
#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat_input.h"
#include "cli.h"

#define MAX_PASTES 64

struct chat_input {
    volatile sig_atomic_t *interrupted;
    int tty, block;                  /* block: inside a """ message */
    EditLine *el;
    History *hist;
    char hist_path[1024];
    char *paste[MAX_PASTES];         /* pastes of the line being edited */
    int n_paste;
};

static chat_input *client(EditLine *el)
{
    chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return in;
}

static char *prompt(EditLine *el)
{
    return client(el)->block ? "... " : "> ";
}

/* The tag that stands for paste k of the line. */
static void paste_tag(const chat_input *in, int k, char *tag, size_t cap)
{
    const char *s = in->paste[k];
    size_t chars = 0, lines = 1;
    for (const char *p = s; *p; p++) {
        chars += ((unsigned char)*p & 0xC0) != 0x80;
        lines += *p == '\n';
    }
    snprintf(tag, cap, "[paste %d: %zu characters, %zu line%s]", k + 1, chars, lines,
             lines == 1 ? "" : "s");
}

static unsigned char on_paste(EditLine *el, int ch)
{
    (void)ch;
    static const char end[] = "\033[201~";
    chat_input *in = client(el);
    cli_buf b = {0};
    char chunk[4096];
    size_t scanned = 0;
    char *mark = NULL;
    while (!mark) {
        ssize_t r = read(STDIN_FILENO, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR && !*in->interrupted)
            continue;
        if (r <= 0 || cli_buf_add(&b, chunk, (size_t)r))
            break;
        mark = memmem(b.p + scanned, b.n - scanned, end, sizeof end - 1);
        scanned = b.n > sizeof end ? b.n - sizeof end : 0;
    }
    if (mark) {
        *mark = 0;
        if (mark[sizeof end - 1])
            el_push(el, mark + sizeof end - 1); /* keys typed after the paste */
        b.n = (size_t)(mark - b.p);
    }
    /* terminals send a newline as CR; NUL bytes are not text */
    size_t w = 0;
    for (size_t r = 0; r < b.n; r++) {
        char c = b.p[r];
        if (c == '\r' && r + 1 < b.n && b.p[r + 1] == '\n')
            continue;
        if (c)
            b.p[w++] = c == '\r' ? '\n' : c;
    }
    while (w && b.p[w - 1] == '\n')
        w--;
    if (b.p)
        b.p[w] = 0;
    if (!w || *in->interrupted) {
        free(b.p);
        return CC_REFRESH;
    }
    if (w <= 200 && !memchr(b.p, '\n', w)) {
        el_insertstr(el, b.p);
        free(b.p);
        return CC_REFRESH;
    }
    if (in->n_paste == MAX_PASTES) {
        free(b.p);
        return CC_REFRESH_BEEP;
    }
    in->paste[in->n_paste++] = b.p;
    char tag[96];
    paste_tag(in, in->n_paste - 1, tag, sizeof tag);
    el_insertstr(el, tag);
    return CC_REFRESH;
}

/* Ctrl-D: the end on an empty line (without libedit's "^D" echo), else
 * delete the character under the cursor. */
static unsigned char on_ctrl_d(EditLine *el, int ch)
{
    (void)ch;
    const LineInfo *li = el_line(el);
    if (li->buffer == li->lastchar)
        return CC_EOF;
    if (li->cursor == li->lastchar)
        return CC_ERROR;
    el_cursor(el, 1);
    el_deletestr(el, 1);
    return CC_REFRESH;
}

static void drop_pastes(chat_input *in)
{
    for (int i = 0; i < in->n_paste; i++)
        free(in->paste[i]);
    in->n_paste = 0;
}

/* The line with its paste tags replaced by what was pasted. */
static char *expand(chat_input *in, const char *line, size_t n)
{
    cli_buf b = {0};
    cli_buf_add(&b, "", 0);
    for (size_t i = 0; i < n;) {
        int k = -1;
        size_t tl = 0;
        char tag[96];
        for (int j = 0; j < in->n_paste && k < 0; j++) {
            paste_tag(in, j, tag, sizeof tag);
            tl = strlen(tag);
            if (n - i >= tl && !memcmp(line + i, tag, tl))
                k = j;
        }
        if (k >= 0) {
            cli_buf_add(&b, in->paste[k], strlen(in->paste[k]));
            i += tl;
        } else {
            cli_buf_add(&b, line + i, 1);
            i++;
        }
    }
    drop_pastes(in);
    return b.p;
}

/* One line without its newline, malloc'd; NULL at the end of input or when
 * Ctrl-C discarded it (*cancelled). */
static char *read_line(chat_input *in, int *cancelled)
{
    if (in->tty) {
        int count = 0;
        const char *l = el_gets(in->el, &count);
        if (*in->interrupted) {
            *in->interrupted = 0;
            *cancelled = 1;
            drop_pastes(in);
            fputs("\n", stdout);
            return NULL;
        }
        if (!l || count <= 0) {
            drop_pastes(in);
            fputs("\n", stdout); /* Ctrl-D: leave the terminal on a new line */
            return NULL;
        }
        size_t n = strlen(l);
        while (n && (l[n - 1] == '\n' || l[n - 1] == '\r'))
            n--;
        return expand(in, l, n);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        if (*in->interrupted) {
            *in->interrupted = 0;
            *cancelled = 1;
            clearerr(stdin);
        }
        return NULL;
    }
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    return line;
}

char *chat_input_read(chat_input *in, int *cancelled)
{
    cli_buf msg = {0};
    int lines = 0;
    *cancelled = 0;
    for (;;) {
        char *l = read_line(in, cancelled);
        if (!l) {
            int was = in->block;
            in->block = 0;
            if (*cancelled || !was) {
                free(msg.p);
                return NULL;
            }
            return msg.p; /* the end of input closes a """ message */
        }
        if (!strcmp(l, "\"\"\"")) {
            free(l);
            if (!in->block) {
                in->block = 1;
                continue;
            }
            in->block = 0;
            if (!msg.p)
                cli_buf_add(&msg, "", 0);
            return msg.p;
        }
        if (!in->block) {
            free(msg.p);
            return l;
        }
        if ((lines++ && cli_buf_add(&msg, "\n", 1)) || cli_buf_add(&msg, l, strlen(l))) {
            free(l);
            free(msg.p);
            return NULL;
        }
        free(l);
    }
}

chat_input *chat_input_open(volatile sig_atomic_t *interrupted)
{
    chat_input *in = calloc(1, sizeof *in);
    if (!in)
        return NULL;
    in->interrupted = interrupted;
    in->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (!in->tty)
        return in;
    setlocale(LC_CTYPE, "");
    HistEvent ev;
    if (!(in->el = el_init("moestream", stdin, stdout, stderr)) || !(in->hist = history_init())) {
        chat_input_close(in);
        return NULL;
    }
    history(in->hist, &ev, H_SETSIZE, 1000);
    history(in->hist, &ev, H_SETUNIQUE, 1);
    cli_state_path(NULL, "chat_history", in->hist_path, sizeof in->hist_path);
    if (in->hist_path[0])
        history(in->hist, &ev, H_LOAD, in->hist_path); /* absent the first time */
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_PROMPT, prompt);
    el_set(in->el, EL_HIST, history, in->hist);
    el_source(in->el, NULL); /* the user's ~/.editrc */
    /* the wide call keeps the names as given; the narrow one leaks copies */
    el_wset(in->el, EL_ADDFN, L"ms-paste", L"a bracketed paste", on_paste);
    el_set(in->el, EL_BIND, "\\e[200~", "ms-paste", NULL);
    el_set(in->el, EL_BIND, "^R", "em-inc-search-prev", NULL);
    el_wset(in->el, EL_ADDFN, L"ms-eof", L"end on an empty line, else delete", on_ctrl_d);
    el_set(in->el, EL_BIND, "^D", "ms-eof", NULL);
    fputs("\033[?2004h", stdout); /* mark pastes */
    fflush(stdout);
    return in;
}

void chat_input_remember(chat_input *in, const char *text)
{
    HistEvent ev;
    if (!in->hist || strlen(text) > 16384)
        return;
    history(in->hist, &ev, H_ENTER, text);
    if (in->hist_path[0])
        history(in->hist, &ev, H_SAVE, in->hist_path);
}

int chat_input_tty(const chat_input *in)
{
    return in->tty;
}

void chat_input_close(chat_input *in)
{
    if (!in)
        return;
    if (in->tty) {
        fputs("\033[?2004l", stdout);
        fflush(stdout);
    }
    drop_pastes(in);
    if (in->hist)
        history_end(in->hist);
    if (in->el)
        el_end(in->el);
    free(in);
}
