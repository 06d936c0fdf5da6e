/* The messages a person types into `moestream chat` (chat_input.c).
 *
 * On a terminal: libedit's line editor (arrow keys, Ctrl-R search, history
 * saved under $XDG_STATE_HOME/moestream/chat_history), bracketed paste (a
 * paste of any length and any number of lines becomes part of one message;
 * a long one shows as a short tag while the line is edited), and """ on a
 * line of its own to start and end a message of several lines. Elsewhere
 * (piped input): a line is a message, with no length limit, """ blocks
 * alike. */
#ifndef MS_APP_CHAT_INPUT_H
#define MS_APP_CHAT_INPUT_H

#include <signal.h>

typedef struct chat_input chat_input;

/* interrupted: set by the caller's SIGINT handler; Ctrl-C at the prompt
 * discards the message being typed. NULL when no memory. */
chat_input *chat_input_open(volatile sig_atomic_t *interrupted);
/* The next message (caller frees); NULL at the end of input (Ctrl-D on an
 * empty line, end of the pipe). *cancelled: Ctrl-C discarded a message;
 * read again. */
char *chat_input_read(chat_input *in, int *cancelled);
/* Keeps a message in the history (and its file) for recall. */
void chat_input_remember(chat_input *in, const char *text);
/* Whether messages come from a person at a terminal. */
int chat_input_tty(const chat_input *in);
void chat_input_close(chat_input *in);

#endif
